"""An operator's confirmation of an action, with the reason recorded in its event."""

from __future__ import annotations

from django import forms


class ConfirmForm(forms.Form):
    """The confirm step: submitting it is the confirmation; the reason is optional."""

    reason = forms.CharField(
        label="Reason (recorded with the event)", max_length=300, required=False
    )
