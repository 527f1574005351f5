"""The signed-in user's own settings: SSH keys (issue 32)."""

from __future__ import annotations

from django import forms

from tenants.ssh_keys import MAX_KEY_NAME, MAX_PUBLIC_KEY_CHARS


class SshKeyForm(forms.Form):
    public_key = forms.CharField(
        max_length=MAX_PUBLIC_KEY_CHARS,
        strip=False,
        widget=forms.Textarea(attrs={"rows": 3, "placeholder": "ssh-ed25519 AAAA… you@laptop"}),
        help_text="The public key: the one line of your .pub file (ed25519, ECDSA, RSA ≥ 3072).",
    )
    name = forms.CharField(
        max_length=MAX_KEY_NAME, required=False, help_text="Default: the key's comment."
    )
