"""Where rules register: the rule modules import this, and ``evaluate``
(the package) imports the rule modules, so the imports point one way."""

from __future__ import annotations

from typing import Callable

from conveyor.doctor.observations import Observations
from conveyor.doctor.report import Finding

Rule = Callable[[Observations], list[Finding]]

#: Every rule, in registration order (one module per family).
RULES: list[Rule] = []


def rule(function: Rule) -> Rule:
    """Registers a rule."""
    RULES.append(function)
    return function
