"""What billing tells the apps above it without importing them (``neocloud.core.hooks``):
how its calls to Stripe and Stripe's webhooks went. Monitoring registers both in its
``AppConfig.ready``; an answer must be cheap and never raise.

- ``stripe_called`` (``call_all``): one SDK call (its operation, e.g. ``CustomerService.create``;
  ``ok`` or the error's class name; seconds, the SDK's own retries included).
- ``webhook_received`` (``call_all``): one delivery and what came of it: the service's outcome
  (a sentence such as ``duplicate`` or ``ignored: …``) or the error's code, and whether it
  failed.
"""

from __future__ import annotations

from neocloud.core.hooks import Hook

# (operation, outcome, seconds)
stripe_called: Hook[[str, str, float], None] = Hook("billing.stripe_called")
# (provider, outcome, failed)
webhook_received: Hook[[str, str, bool], None] = Hook("billing.webhook_received")
