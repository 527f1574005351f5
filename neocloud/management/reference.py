"""The reference pages written from the code: error codes, event types, management commands and
the OpenAPI schema (``manage.py docs_reference`` writes them; ``tests/test_docs_generated.py``
fails when a committed page differs from what this module writes now, so a code, an event or a
command added without its page fails a test)."""

from __future__ import annotations

import argparse
import importlib
import inspect
import pkgutil
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from django.apps import apps
from django.conf import settings
from django.core.management import get_commands, load_command_class
from django.core.management.base import BaseCommand
from drf_spectacular.generators import SchemaGenerator
from drf_spectacular.renderers import OpenApiYamlRenderer
from rest_framework import exceptions

from events.types import registered
from neocloud.core.errors import ApplicationError

T = TypeVar("T")
ROOT = Path(settings.BASE_DIR)
DOCS = ROOT / "docs" / "reference"
GENERATED = (
    "<!-- Written by `manage.py docs_reference` from the code: edit the code, not this page. -->"
)

# Codes the API answers that no exception class carries: (code, HTTP status, where, meaning).
HANDLER_CODES = [
    (
        "unknown_field",
        400,
        "neocloud.api.bodies",
        "A name the request body or query does not take; `fields` names each, with a hint when"
        " one is close to a real field. Nothing is written.",
    ),
    (
        "body_too_large",
        413,
        "neocloud.bodies",
        "The request body is larger than its route allows (`details.limit_bytes`).",
    ),
    (
        "server_error",
        500,
        "neocloud.api.errors",
        "An unexpected failure; it has been logged. Never an HTML page under `/api/`.",
    ),
]


def project_apps() -> list[str]:
    """The apps of this repository (the test-only ones aside)."""
    return sorted(
        config.name
        for config in apps.get_app_configs()
        if Path(config.path).parent == ROOT and not config.name.startswith("tests")
    )


def _one_paragraph(text: str | None) -> str:
    return " ".join((text or "").split()).replace("|", "\\|")


def _import_every_module() -> None:
    """Import every module of the project's apps, so that every error class is defined."""
    for name in project_apps():
        package = importlib.import_module(name)
        for module in pkgutil.walk_packages(package.__path__, f"{name}."):
            if not re.search(r"\.(tests|migrations|management)(\.|$)", module.name):
                importlib.import_module(module.name)


def _subclasses(cls: type[T]) -> Iterator[type[T]]:
    for sub in cls.__subclasses__():
        yield sub
        yield from _subclasses(sub)


def error_codes_page() -> str:
    _import_every_module()
    rows: dict[tuple[str, int], list[tuple[str, str, bool]]] = {}
    for cls in _subclasses(ApplicationError):
        if cls.__module__.split(".")[0] not in project_apps():
            continue
        meaning = _one_paragraph(cls.__dict__.get("__doc__"))
        where = f"`{cls.__module__}.{cls.__qualname__}`"
        rows.setdefault((cls.code, cls.http_status), []).append((where, meaning, cls.retryable))
    drf_errors: list[type[exceptions.APIException]] = [exceptions.APIException]
    for drf in drf_errors + list(_subclasses(exceptions.APIException)):
        where = f"`rest_framework.exceptions.{drf.__name__}`"
        meaning = _one_paragraph(str(drf.default_detail))
        rows.setdefault((drf.default_code, drf.status_code), []).append((where, meaning, False))
    for code, status, module, meaning in HANDLER_CODES:
        rows.setdefault((code, status), []).append((f"`{module}`", meaning, False))
    lines = [
        GENERATED,
        "",
        "# Error codes",
        "",
        "Every error the API answers has one JSON shape,",
        '`{"error": {"code": "…", "message": "…", "fields": {…}, "details": {…}}}`, and a stable',
        "`code` a client can act on ([the REST API's conventions](../user-guide/api.md)). A code",
        "marked retryable may succeed if the same request is sent again later (a lost race, an",
        "unreachable provider); any other will not until the request or the state changes.",
        "",
        "| code | HTTP | retryable | meaning | raised as |",
        "| --- | --- | --- | --- | --- |",
    ]
    for (code, status), raisers in sorted(rows.items()):
        meanings = list(dict.fromkeys(meaning for _, meaning, _ in raisers if meaning))
        retryable = "yes" if any(r for _, _, r in raisers) else ""
        where = ", ".join(sorted(where for where, _, _ in raisers))
        lines.append(f"| `{code}` | {status} | {retryable} | {' '.join(meanings)} | {where} |")
    return "\n".join(lines) + "\n"


def _type_name(annotation: Any) -> str:
    if inspect.isclass(annotation) and not getattr(annotation, "__args__", None):
        return annotation.__name__
    return re.sub(r"\b(?:[a-z_]\w*\.)+(?=[A-Za-z_])", "", str(annotation)).replace("|", "\\|")


def events_page() -> str:
    types = {
        name: cls
        for name, cls in registered().items()
        if cls.__module__.split(".")[0] in project_apps()
    }
    lines = [
        GENERATED,
        "",
        "# Events",
        "",
        "Every event type the log stores, by app: its stable name, its schema version (an older",
        "payload is brought up to it by the type's upcasters when it is read) and its fields.",
        "A payload is validated when it is appended and refuses a field it does not declare",
        "([the event log](../architecture/event-log.md)).",
    ]
    app = ""
    for name, cls in sorted(types.items()):
        if name.split(".")[0] != app:
            app = name.split(".")[0]
            lines += ["", f"## {app}", ""]
        lines += [f"### `{name}`", ""]
        about = _one_paragraph(cls.__dict__.get("__doc__"))
        lines.append(f"Schema version {cls.schema_version}; `{cls.__module__}.{cls.__qualname__}`.")
        if about:
            lines += ["", about]
        lines.append("")
        if not cls.model_fields:
            lines += ["No fields.", ""]
            continue
        lines += ["| field | type | default |", "| --- | --- | --- |"]
        for field, info in cls.model_fields.items():
            default = (
                "required"
                if info.is_required()
                else f"`{info.get_default(call_default_factory=True)!r}`"
            )
            lines.append(f"| `{field}` | `{_type_name(info.annotation)}` | {default} |")
        lines.append("")
    return "\n".join(lines)


def _django_options() -> set[str]:
    """The options every command has (``--verbosity``, ``--settings``…): documented once."""
    return {action.dest for action in BaseCommand().create_parser("manage.py", "x")._actions}


def _shown_default(action: argparse.Action) -> str:
    if action.required or isinstance(action, argparse._StoreTrueAction | argparse._HelpAction):
        return ""
    if action.default in (None, "", argparse.SUPPRESS):
        return ""
    return f"`{str(action.default).replace(str(ROOT), '.')}`"


def _arguments(parser: argparse.ArgumentParser, common: set[str], prefix: str) -> list[str]:
    rows, nested = [], []
    for action in parser._actions:
        if action.dest in common or isinstance(action, argparse._HelpAction):
            continue
        if isinstance(action, argparse._SubParsersAction):
            helps = {choice.dest: choice.help for choice in action._choices_actions}
            for name, sub in action.choices.items():
                nested += ["", f"`{prefix} {name}`: {_one_paragraph(helps.get(name))}", ""]
                nested += _arguments(sub, common, f"{prefix} {name}")
            continue
        name = ", ".join(f"`{option}`" for option in action.option_strings)
        name = name or f"`{action.metavar or action.dest}`"
        help_text = _one_paragraph(action.help % vars(action) if action.help else "")
        if action.choices and not isinstance(action.choices, dict):
            help_text += " One of " + ", ".join(f"`{c}`" for c in action.choices) + "."
        rows.append(f"| {name} | {_shown_default(action)} | {help_text} |")
    table = ["| argument | default | meaning |", "| --- | --- | --- |", *rows] if rows else []
    return table + nested


def commands_page() -> str:
    common = _django_options()
    lines = [
        GENERATED,
        "",
        "# Management commands",
        "",
        "Every `manage.py` command of NeoCloud's apps, with its arguments as `--help` gives them.",
        "Each also takes Django's common options (`--verbosity`, `--settings`, `--pythonpath`,",
        "`--traceback`, `--no-color`, `--force-color`, `--skip-checks`).",
    ]
    ours = {name: app for name, app in get_commands().items() if app in project_apps()}
    for name, app in sorted(ours.items()):
        command = load_command_class(app, name)
        parser = command.create_parser("manage.py", name)
        lines += ["", f"## `{name}`", "", f"{_one_paragraph(command.help)} (app `{app}`)", ""]
        lines += _arguments(parser, common, name)
    return "\n".join(lines) + "\n"


def openapi_schema() -> str:
    """The schema ``/api/schema/`` serves, as ``manage.py spectacular`` writes it."""
    generator = SchemaGenerator()  # type: ignore[no-untyped-call]
    schema = generator.get_schema(request=None, public=True)  # type: ignore[no-untyped-call]
    written: bytes = OpenApiYamlRenderer().render(schema, renderer_context={})  # type: ignore[no-untyped-call]
    return written.decode()


PAGES: dict[str, Callable[[], str]] = {
    "error-codes.md": error_codes_page,
    "events.md": events_page,
    "commands.md": commands_page,
    "openapi.yaml": openapi_schema,
}
