"""The checks: each rule is one small function of the observations returning
its findings (empty when the script is fine). ``evaluate`` runs them all."""

from __future__ import annotations

from conveyor.doctor.observations import Observations
from conveyor.doctor.report import SEVERITIES, Finding
from conveyor.doctor.rules import data, debug, device, model  # noqa: F401  (each registers its rules)
from conveyor.doctor.rules.registry import RULES


def evaluate(obs: Observations) -> list[Finding]:
    """All findings, most severe first."""
    findings = [finding for check in RULES for finding in check(obs)]
    return sorted(findings, key=lambda f: SEVERITIES.index(f.severity))
