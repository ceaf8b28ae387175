"""Findings and the report: text, JSON (schema in docs/doctor.md) and a plot."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any, Optional, Union

from conveyor.doctor.observations import Observations, Site

SCHEMA = "conveyor.doctor/1"
SEVERITIES = ("high", "medium", "low", "suggestion")
GAIN_KINDS = ("measured", "estimated", "not measured here")


@dataclass
class Finding:
    """One rule's verdict: what was seen where, why it matters, the fix, the gain."""

    rule: str
    severity: str
    title: str
    evidence: str
    site: Optional[Site]
    why: str
    fix: str
    gain_kind: str
    gain: str
    counts: dict[str, float] = field(default_factory=dict)
    #: Seconds per step the fix would save, when measured or estimated here.
    gain_seconds: Optional[float] = None

    def to_dict(self) -> dict[str, Any]:
        """The finding as JSON-ready data (see docs/doctor.md)."""
        return {
            "rule": self.rule,
            "severity": self.severity,
            "title": self.title,
            "evidence": {
                "text": self.evidence,
                "file": self.site.file if self.site else None,
                "line": self.site.line if self.site else None,
                "counts": dict(self.counts),
            },
            "why": self.why,
            "fix": self.fix,
            "gain": {"kind": self.gain_kind, "text": self.gain, "seconds_per_step": self.gain_seconds},
        }


class Report:
    """What the doctor saw and what it advises; ``str(report)`` is the text form."""

    def __init__(self, obs: Observations, findings: list[Finding]) -> None:
        self.obs = obs
        self.findings = findings

    def rule_ids(self) -> list[str]:
        """The ids of the findings, in report order."""
        return [f.rule for f in self.findings]

    def to_dict(self) -> dict[str, Any]:
        """The report as JSON-ready data following the ``conveyor.doctor/1`` schema."""
        obs = self.obs
        ms = 1000.0
        return {
            "schema": SCHEMA,
            "script": obs.script,
            "target": obs.target,
            "stopped": obs.stopped,
            "error": obs.error,
            "steps": len(obs.steps),
            "step_ms": {
                "median": obs.median("seconds") * ms,
                "data_wait": obs.median("data_wait") * ms,
                "copy": obs.median("copy") * ms,
                "compute": obs.median("compute") * ms,
            },
            "evaluations": obs.evaluations,
            "evaluation_ms": obs.evaluation_seconds * ms,
            "per_step": [
                {
                    "step": s.index + 1,
                    "total_ms": s.seconds * ms,
                    "data_wait_ms": s.data_wait * ms,
                    "copy_ms": s.copy * ms,
                    "evaluation_ms": s.evaluation * ms,
                    "compute_ms": s.compute * ms,
                }
                for s in obs.steps
            ],
            "flags": self._flags(),
            "findings": [f.to_dict() for f in self.findings],
        }

    def _flags(self) -> dict[str, Union[bool, int, None]]:
        obs = self.obs
        return {
            "cudnn_benchmark": obs.cudnn_benchmark,
            "anomaly_detection_steps": obs.anomaly_steps,
            "profiler_steps": obs.profiler_steps,
            "deterministic_algorithms_steps": obs.deterministic_steps,
            "autocast_calls": sum(m.autocast_calls for m in obs.models),
        }

    def write_json(self, path: str) -> None:
        """Writes the JSON report to ``path``."""
        with open(path, "w", encoding="utf-8") as file:
            json.dump(self.to_dict(), file, indent=2)
            file.write("\n")

    def plot(self, path: str) -> None:
        """Writes a PNG of per-step stacked bars: data wait, host→device copy,
        compute, evaluation."""
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure

        steps = self.obs.steps
        x = [s.index + 1 for s in steps]
        wait = [s.data_wait * 1000 for s in steps]
        copy = [s.copy * 1000 for s in steps]
        compute = [s.compute * 1000 for s in steps]
        evaluation = [s.evaluation * 1000 for s in steps]
        figure = Figure(figsize=(max(6.0, len(steps) * 0.15), 4))
        FigureCanvasAgg(figure)
        axes = figure.add_subplot()
        axes.bar(x, wait, label="data wait", color="#d62728")
        axes.bar(x, copy, bottom=wait, label="host→device copy", color="#ff7f0e")
        axes.bar(x, compute, bottom=[w + c for w, c in zip(wait, copy)], label="compute", color="#1f77b4")
        if any(evaluation):
            below = [w + c + k for w, c, k in zip(wait, copy, compute)]
            axes.bar(x, evaluation, bottom=below, label="evaluation", color="#2ca02c")
        axes.set_xlabel("optimizer step")
        axes.set_ylabel("ms")
        name = os.path.basename(self.obs.script) if self.obs.script else "watched code"
        axes.set_title(f"conveyor doctor: where each step's time went ({name})", fontsize=9)
        axes.legend()
        figure.tight_layout()
        figure.savefig(path, dpi=100)

    def __str__(self) -> str:
        obs = self.obs
        lines = [f"conveyor doctor: {obs.script or 'watched code'} (target {obs.target})"]
        lines.append(f"  {len(obs.steps)} optimizer steps observed; {obs.stopped}")
        measured = obs.measured_steps()
        if measured:
            total = obs.median("seconds")
            share = obs.median("data_wait") / total * 100 if total > 0 else 0.0
            warm = " (step 1 is warm-up and left out)" if len(obs.steps) > 1 else ""
            lines.append(
                f"  median step {total * 1000:.2f} ms{warm}:"
                f" data wait {obs.median('data_wait') * 1000:.2f} ms"
                f" ({share:.0f}%), host→device copy {obs.median('copy') * 1000:.2f} ms,"
                f" compute {obs.median('compute') * 1000:.2f} ms"
            )
        if obs.evaluations:
            lines.append(
                f"  evaluation between steps (forwards in eval mode or without gradients): {obs.evaluations}"
                f" time(s), {obs.evaluation_seconds:.2f} s in all, not counted in the steps' compute"
            )
        for loader in obs.loaders:
            per_batch = loader.wait / loader.batches * 1000 if loader.batches else 0.0
            lines.append(
                f"  loader: {loader.describe()}: {loader.batches} batches in {loader.epochs} epoch(s),"
                f" {per_batch:.2f} ms wait per batch"
            )
        flags = ", ".join(f"{k}={v}" for k, v in self._flags().items())
        lines.append(f"  flags: {flags}")
        if obs.error:
            lines.append(
                "  the script raised an exception (traceback above); findings cover what ran before it"
            )
        if not self.findings:
            lines.append("  no findings")
        for f in self.findings:
            where = f"  {f.site}" if f.site else ""
            lines.append("")
            lines.append(f"[{f.severity}] {f.rule}{where}: {f.title}")
            lines.append(f"  evidence: {f.evidence}")
            lines.append(f"  why: {f.why}")
            lines.append("  fix:")
            lines.extend(f"      {line}" for line in f.fix.splitlines())
            lines.append(f"  gain ({f.gain_kind}): {f.gain}")
        return "\n".join(lines)


def _check(errors: list[str], ok: bool, message: str) -> None:
    if not ok:
        errors.append(message)


def validate_report(data: Any) -> list[str]:
    """The ways ``data`` (a parsed ``--json`` file) breaks the ``conveyor.doctor/1``
    schema of docs/doctor.md; an empty list when it conforms."""
    errors: list[str] = []
    if not isinstance(data, dict):
        return ["report: not an object"]
    _check(errors, data.get("schema") == SCHEMA, f"schema: expected {SCHEMA!r}")
    for key, types in (("script", (str, type(None))), ("error", (str, type(None))), ("stopped", str)):
        _check(errors, isinstance(data.get(key), types), f"{key}: wrong type or missing")
    _check(errors, data.get("target") in ("cpu", "cuda"), "target: expected 'cpu' or 'cuda'")
    _check(errors, isinstance(data.get("steps"), int), "steps: expected an integer")
    step_ms = data.get("step_ms")
    _check(errors, isinstance(step_ms, dict), "step_ms: expected an object")
    if isinstance(step_ms, dict):
        for key in ("median", "data_wait", "copy", "compute"):
            _check(errors, isinstance(step_ms.get(key), (int, float)), f"step_ms.{key}: expected a number")
    per_step = data.get("per_step")
    _check(errors, isinstance(per_step, list), "per_step: expected a list")
    for i, step in enumerate(per_step if isinstance(per_step, list) else []):
        for key in ("step", "total_ms", "data_wait_ms", "copy_ms", "compute_ms"):
            value = step.get(key) if isinstance(step, dict) else None
            _check(errors, isinstance(value, (int, float)), f"per_step[{i}].{key}: expected a number")
    _check(errors, isinstance(data.get("flags"), dict), "flags: expected an object")
    findings = data.get("findings")
    _check(errors, isinstance(findings, list), "findings: expected a list")
    for i, f in enumerate(findings if isinstance(findings, list) else []):
        where = f"findings[{i}]"
        if not isinstance(f, dict):
            errors.append(f"{where}: not an object")
            continue
        for key in ("rule", "title", "why", "fix"):
            _check(errors, isinstance(f.get(key), str) and f.get(key) != "", f"{where}.{key}: expected text")
        _check(errors, f.get("severity") in SEVERITIES, f"{where}.severity: expected one of {SEVERITIES}")
        evidence = f.get("evidence")
        if not isinstance(evidence, dict):
            errors.append(f"{where}.evidence: expected an object")
        else:
            _check(errors, isinstance(evidence.get("text"), str), f"{where}.evidence.text: expected text")
            file, line = evidence.get("file", 0), evidence.get("line", "")  # Both required.
            _check(
                errors, file is None or isinstance(file, str), f"{where}.evidence.file: expected text or null"
            )
            _check(
                errors, line is None or isinstance(line, int), f"{where}.evidence.line: expected an integer"
            )
            counts = evidence.get("counts")
            _check(
                errors,
                isinstance(counts, dict) and all(isinstance(v, (int, float)) for v in counts.values()),
                f"{where}.evidence.counts: expected an object of numbers",
            )
        gain = f.get("gain")
        if not isinstance(gain, dict):
            errors.append(f"{where}.gain: expected an object")
        else:
            _check(errors, gain.get("kind") in GAIN_KINDS, f"{where}.gain.kind: expected one of {GAIN_KINDS}")
            _check(errors, isinstance(gain.get("text"), str), f"{where}.gain.text: expected text")
            seconds = gain.get("seconds_per_step")
            _check(
                errors,
                seconds is None or isinstance(seconds, (int, float)),
                f"{where}.gain.seconds_per_step: expected a number or null",
            )
    return errors
