"""Rules about debugging aids left on: anomaly detection, the profiler, gradcheck."""

from __future__ import annotations

from conveyor.doctor.observations import Observations
from conveyor.doctor.report import Finding
from conveyor.doctor.rules.registry import rule


@rule
def debug_api_on(obs: Observations) -> list[Finding]:
    """Anomaly detection, the autograd profiler or gradcheck run during training."""
    findings = []
    steps = len(obs.steps)
    for site, entry in obs.debug.items():
        if entry.name == "anomaly detection" and obs.anomaly_steps == 0:
            continue  # Turned on and off again before any step.
        seen = (
            f"on during {obs.anomaly_steps} of {steps} steps"
            if entry.name == "anomaly detection"
            else (f"called {entry.count} times")
        )
        findings.append(_finding(entry.name, f"{entry.name} {seen}", site, entry.count))
    if obs.profiler_steps and not any(e.name == "profiler" for e in obs.debug.values()):
        findings.append(
            _finding(
                "profiler",
                f"the profiler was on during {obs.profiler_steps} of {steps} steps",
                obs.step_site,
                obs.profiler_steps,
            )
        )
    return findings


_FIXES = {
    "anomaly detection": "# remove it, or turn it on only while debugging:\n"
    "if args.debug:\n    torch.autograd.set_detect_anomaly(True)",
    "profiler": "# profile a few steps on a schedule, not the whole run:\n"
    "with torch.profiler.profile(schedule=torch.profiler.schedule(wait=1, warmup=1, active=3)) as prof:\n"
    "    for batch in loader:\n        train_step(batch)\n        prof.step()",
    "gradcheck": "# check gradients in a test, not in the training loop",
}


def _finding(name: str, evidence: str, site: object, count: int) -> Finding:
    return Finding(
        "debug-api",
        "high",
        f"{name} is on during training",
        evidence,
        site,  # type: ignore[arg-type]
        "Debugging aids add work to every step: anomaly detection keeps a traceback per op and "
        "checks every backward result, the profiler records every op, gradcheck evaluates the "
        "function many times in float64.",
        _FIXES.get(name, _FIXES["gradcheck"]),
        "estimated",
        "the whole cost of the debugging aid, every step it is on",
        {"count": count},
    )
