from django.urls import path

from console.views import (
    account,
    auth,
    billing,
    capacity,
    dev,
    home,
    joining,
    operator,
    operator_capacity,
    organization,
    submit,
    usage,
    workloads,
)

app_name = "console"

urlpatterns = [
    path("", auth.root, name="root"),
    path("login", auth.SignIn.as_view(), name="sign-in"),
    path("logout", auth.SignOut.as_view(), name="sign-out"),
    path("password-reset", auth.PasswordReset.as_view(), name="password-reset"),
    path("password-reset/sent", auth.PasswordResetSent.as_view(), name="password-reset-sent"),
    path(
        "password-reset/<uidb64>/<token>",
        auth.PasswordResetConfirm.as_view(),
        name="password-reset-confirm",
    ),
    path(
        "password-reset/done",
        auth.PasswordResetComplete.as_view(),
        name="password-reset-complete",
    ),
    path("overview", home.overview, name="overview"),
    path("organization/switch", home.switch, name="switch"),
    # Each area's own pages.
    *workloads.urlpatterns,
    *submit.urlpatterns,
    *capacity.urlpatterns,
    *usage.urlpatterns,
    *organization.urlpatterns,
    *joining.urlpatterns,
    *billing.urlpatterns,
    *operator.urlpatterns,
    *operator_capacity.urlpatterns,
    *account.urlpatterns,  # issue 32: the user's SSH keys
    *dev.urlpatterns,  # issue 32: start a GPU dev environment
]
