"""What a workload runs: argv, image, variables, the project secrets it is given, its
working directory and ports, held to ``specs``' bounds. A secret is referred to by name and
must exist in the project when the workload is submitted (its value is read only by what will
start the workload, never here).

Reads only, no locks: a secret deleted after the check leaves a name without a value, which
the agent reports then.
"""

from __future__ import annotations

from scheduler.services.shape import invalid
from scheduler.specs import (
    IMAGE_REFERENCE,
    MAX_ARG_BYTES,
    MAX_ARGS,
    MAX_ARGV_BYTES,
    MAX_ENV,
    MAX_ENV_VALUE_BYTES,
    MAX_IMAGE_BYTES,
    MAX_IMAGE_NAME,
    MAX_PATH_BYTES,
    MAX_PORTS,
    MAX_SECRETS,
    WorkloadKind,
    WorkloadSpec,
)
from tenants import selectors as tenancy
from tenants.models import Project
from tenants.secrets import variable_name_problem


def check_program(spec: WorkloadSpec, project: Project) -> None:
    check_program_bounds(spec)
    missing = tenancy.secret_names_missing(project=project, names=spec.secrets)
    if missing:
        raise invalid("secrets", f"the project has no secrets {', '.join(missing)}", "unknown")


def check_program_bounds(spec: WorkloadSpec) -> None:
    """All but the secrets' existence: what a catalog offering's defaults are held to too."""
    _check_command(spec.command)
    _check_image(spec.image)
    _check_env(spec)
    if spec.working_dir is not None and not (
        spec.working_dir.startswith("/")
        and len(spec.working_dir.encode()) <= MAX_PATH_BYTES
        and "\0" not in spec.working_dir
    ):
        raise invalid("working_dir", f"working_dir is an absolute path of {MAX_PATH_BYTES} bytes")
    _check_ports(spec)


def _check_command(command: tuple[str, ...]) -> None:
    if len(command) > MAX_ARGS:
        raise invalid("command", f"command has at most {MAX_ARGS} arguments")
    sizes = [len(arg.encode()) for arg in command]
    if any(size > MAX_ARG_BYTES for size in sizes) or sum(sizes) > MAX_ARGV_BYTES:
        raise invalid(
            "command",
            f"an argument is at most {MAX_ARG_BYTES} bytes, all of them {MAX_ARGV_BYTES}",
        )
    if any("\0" in arg for arg in command):
        raise invalid("command", "an argument holds no NUL character")
    if command and not command[0]:
        raise invalid("command", "the program to run (the first argument) is not empty")


def _check_image(image: str | None) -> None:
    if image is None:
        return
    reference = image.split("@", 1)[0]
    colon = reference.rfind(":")
    name = reference[:colon] if colon > reference.rfind("/") else reference  # without its tag
    if (
        len(image.encode()) > MAX_IMAGE_BYTES
        or not IMAGE_REFERENCE.fullmatch(image)
        or len(name) > MAX_IMAGE_NAME
    ):
        raise invalid("image", f"{image[:100]!r} is not an OCI image reference")


def _check_env(spec: WorkloadSpec) -> None:
    if len(spec.env) > MAX_ENV:
        raise invalid("env", f"env has at most {MAX_ENV} variables")
    for name, value in spec.env.items():
        problem = variable_name_problem(name)
        if problem:
            raise invalid("env", problem)
        if len(value.encode()) > MAX_ENV_VALUE_BYTES or "\0" in value:
            raise invalid("env", f"{name}: a value is at most {MAX_ENV_VALUE_BYTES} bytes, no NUL")
    if len(spec.secrets) > MAX_SECRETS:
        raise invalid("secrets", f"at most {MAX_SECRETS} secrets")
    if len(set(spec.secrets)) != len(spec.secrets):
        raise invalid("secrets", "a secret is named once")
    both = sorted(set(spec.secrets) & set(spec.env))
    if both:
        raise invalid("secrets", f"{', '.join(both)}: both a variable and a secret")
    for name in spec.secrets:
        problem = variable_name_problem(name)
        if problem:
            raise invalid("secrets", problem)


def _check_ports(spec: WorkloadSpec) -> None:
    if not spec.ports:
        _check_http_ports(spec)
        return
    if spec.kind is not WorkloadKind.SERVICE:
        raise invalid("ports", "ports are a service's")
    if len(spec.ports) > MAX_PORTS:
        raise invalid("ports", f"at most {MAX_PORTS} ports")
    if any(not 1 <= port <= 65535 for port in spec.ports):
        raise invalid("ports", "a port is between 1 and 65535")
    if len(set(spec.ports)) != len(spec.ports):
        raise invalid("ports", "a port is given once")
    _check_http_ports(spec)


def _check_http_ports(spec: WorkloadSpec) -> None:
    """A web port is one of the workload's ports, named once."""
    if len(set(spec.http_ports)) != len(spec.http_ports):
        raise invalid("http_ports", "a port is given once")
    outside = sorted(set(spec.http_ports) - set(spec.ports))
    if outside:
        raise invalid("http_ports", f"not among ports: {', '.join(map(str, outside))}")
