"""``manage.py console_screenshots``: pictures of the console's main pages, for the docs.

Drives Chromium (the distribution's, through Playwright: ``pip install -e '.[dev]'``) against
a running NeoCloud, signed in as a customer; by default the demo's, at ``make demo``'s
address. Pages that do not exist in this build are skipped, saying so.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from neocloud.management.commands.demo_setup import CUSTOMER

PAGES = [
    ("overview", "/overview"),
    ("workloads", "/workloads"),
    ("new-workload", "/workloads/new"),
    ("queues", "/queues"),
    ("reservations", "/reservations"),
    ("usage", "/usage"),
    ("billing", "/billing"),
    ("organization", "/organization"),
]
# With --operator EMAIL (a staff user, e.g. the demo's admin@neocloud.local / admin).
OPERATOR_PAGES = [
    ("operator-fleet", "/operator/fleet"),
    ("operator-capacity", "/operator/capacity"),
    ("operator-queues", "/operator/queues"),
]
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking"]


class Command(BaseCommand):
    help = "Screenshot the console's main pages (PNG files) from a running NeoCloud."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--url", default="http://127.0.0.1:8000")
        parser.add_argument("--out", default="docs/screenshots")
        parser.add_argument("--email", default=CUSTOMER[0])
        parser.add_argument("--password", default=CUSTOMER[1])
        parser.add_argument("--chromium", default=shutil.which("chromium") or "")
        parser.add_argument("--operator", default="", help="a staff user's e-mail")
        parser.add_argument("--operator-password", default="")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            from playwright.sync_api import sync_playwright
        except ImportError as missing:
            raise CommandError("needs Playwright: pip install -e '.[dev]'") from missing
        if not options["chromium"]:
            raise CommandError("no chromium found (apt-get install chromium, or --chromium PATH)")
        out = Path(options["out"])
        out.mkdir(parents=True, exist_ok=True)
        base = options["url"].rstrip("/")
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(
                executable_path=options["chromium"], args=CHROMIUM_ARGS
            )
            self._shoot(browser, base, out, options["email"], options["password"], PAGES)
            if options["operator"]:
                self._shoot(
                    browser,
                    base,
                    out,
                    options["operator"],
                    options["operator_password"],
                    OPERATOR_PAGES,
                )
            browser.close()

    def _shoot(
        self,
        browser: Any,
        base: str,
        out: Path,
        email: str,
        password: str,
        pages: list[tuple[str, str]],
    ) -> None:
        """Sign in as ``email`` in a fresh context, then picture each page."""
        context = browser.new_context(viewport={"width": 1280, "height": 800})
        page = context.new_page()
        page.goto(f"{base}/login")
        page.get_by_label("E-mail").fill(email)
        page.get_by_label("Password").fill(password)
        page.get_by_role("button", name="Sign in").click()
        page.wait_for_url(f"{base}/overview")
        for name, path in pages:
            response = page.goto(f"{base}{path}")
            if response is None or response.status != 200:
                status = response.status if response else "no answer"
                self.stderr.write(f"skipped {path}: {status}")
                continue
            page.screenshot(path=str(out / f"{name}.png"), full_page=True)
            self.stdout.write(f"{out / name}.png")
            if name == "workloads" and page.locator("main table a").count():
                page.locator("main table a").first.click()  # the newest workload's page
                page.wait_for_load_state()
                page.screenshot(path=str(out / "workload.png"), full_page=True)
                self.stdout.write(f"{out / 'workload'}.png")
        context.close()
