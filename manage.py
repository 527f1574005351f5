#!/usr/bin/env python
"""Django's command-line entry point for NeoCloud."""

import os
import sys


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "neocloud.settings")
    from django.core.management import execute_from_command_line

    from neocloud.core.startup import settings_load_or_exit

    settings_load_or_exit()
    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
