"""How often the engine's property tests reach each hard case: draws scenarios from
``tests/strategies.py`` as hypothesis generates them and prints the share of each label of
``tests.strategies.reached`` (docs/architecture/engine-properties.md).

Usage: ``.venv/bin/python scripts/engine_scenario_shares.py [EXAMPLES]`` (default 3000), from
the repository's root.
"""

from __future__ import annotations

import os
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("NEOCLOUD_ENGINE", "python")
    from hypothesis import HealthCheck, Phase, given, settings

    from scheduler.engine import Policy, Request, Snapshot, schedule
    from tests.strategies import NOW, reached, scenarios

    examples = int(sys.argv[1]) if len(sys.argv) > 1 else 3000
    counts: Counter[str] = Counter()
    drawn = 0

    @settings(
        max_examples=examples,
        phases=[Phase.generate],
        database=None,
        deadline=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(scenarios())
    def draw(scenario: tuple[Snapshot, list[Request], Policy]) -> None:
        nonlocal drawn
        snapshot, pending, policy = scenario
        drawn += 1
        counts.update(reached(snapshot, schedule(snapshot, pending, policy, NOW), policy))

    draw()
    print(f"{drawn} scenarios")
    for label, count in sorted(counts.items()):
        print(f"{label:32} {count:6} {100 * count / drawn:5.1f} %")
    return 0


if __name__ == "__main__":
    sys.exit(main())
