"""The console's e-mails (invitations, address verifications), sent after the change they
tell of has committed (the view calls them once its service returned), through Django's mail
backend: the console backend in the demo, SMTP from the environment in production."""

from __future__ import annotations

import logging
import smtplib

from django.conf import settings
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


def email_verification_send(*, user: User, link: str) -> bool:
    """E-mail the link that verifies the user's address. False when the mail server refused
    it: the console offers to send another."""
    context = {
        "user": user,
        "link": link,
        "max_age_hours": settings.EMAIL_VERIFICATION_MAX_AGE_S // 3600,
    }
    subject = render_to_string("console/email/verify_email_subject.txt", context).strip()
    body = render_to_string("console/email/verify_email.txt", context)
    try:
        send_mail(subject, body, None, [user.email])
    except (smtplib.SMTPException, OSError):
        logger.warning("user %s: the verification e-mail could not be sent", user.pk, exc_info=True)
        return False
    return True
