"""Where rules register: the rule modules import this, and ``evaluate``
(the package) imports the rule modules, so the imports point one way."""

from __future__ import annotations

from typing import Callable

from conveyor.doctor.observations import Observations
from conveyor.doctor.report import Finding

Rule = Callable[[Observations], list[Finding]]

#: Where the CUDA rules' gains come from: bench/gpu_tuning_guide.py on an
#: NVIDIA H200 (torch 2.11, cuDNN 9.19), a ResNet-18-like net (batch 128 of
#: 3x64x64; each fix alone on the naive loop and beside all the others) and the
#: guide's MNIST example; docs/doctor.md has the tables.
MEASURED_ON = "measured on an H200 (docs/doctor.md)"

#: Every rule, in registration order (one module per family).
RULES: list[Rule] = []


def rule(function: Rule) -> Rule:
    """Registers a rule."""
    RULES.append(function)
    return function
