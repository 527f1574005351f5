"""The console's e-mails, sent after the change they tell of has committed (the view calls
them once its service returned), through Django's mail backend: the console backend in the
demo, SMTP from the environment in production."""

from __future__ import annotations

import logging
import smtplib

from django.core.mail import send_mail
from django.template.loader import render_to_string

from tenants.models import Invitation, User

logger = logging.getLogger(__name__)


def invitation_send(*, invitation: Invitation, link: str, inviter: User) -> bool:
    """E-mail the invitation's link to the invited address. False when the mail server
    refused it: the invitation stands, and the page shows the link to pass on by hand."""
    context = {"invitation": invitation, "link": link, "inviter": inviter}
    subject = render_to_string("console/email/invitation_subject.txt", context).strip()
    body = render_to_string("console/email/invitation.txt", context)
    try:
        send_mail(subject, body, None, [invitation.email])
    except (smtplib.SMTPException, OSError):
        logger.warning("invitation %s: the e-mail could not be sent", invitation.pk, exc_info=True)
        return False
    return True
