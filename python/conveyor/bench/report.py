"""Summaries of benchmark runs: statistics, the printed table and the plot."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Optional

Run = dict[str, Any]
CONVEYOR = "conveyor"


@dataclass(frozen=True)
class Metric:
    """A figure reported for a benchmark: its key in a run's values, its label, and
    whether it is the benchmark's headline figure (plotted)."""

    key: str
    label: str
    headline: bool = False


def run_value(run: Run, key: str) -> Optional[float]:
    """A figure of a run: from the worker's result or the parent's memory sampler."""
    for part in ("result", "memory"):
        value = (run.get(part) or {}).get(key)
        if isinstance(value, (int, float)):
            return float(value)
    return None


def _groups(runs: Sequence[Run]) -> dict[tuple[str, str], list[str]]:
    """(bench, case) -> side labels in first-seen order."""
    groups: dict[tuple[str, str], list[str]] = {}
    for run in runs:
        labels = groups.setdefault((run["bench"], run["case"]), [])
        if run["label"] not in labels:
            labels.append(run["label"])
    return groups


def _values(runs: Sequence[Run], bench: str, case: str, label: str, key: str) -> dict[int, float]:
    values = {}
    for run in runs:
        if (run["bench"], run["case"], run["label"]) == (bench, case, label):
            value = run_value(run, key)
            if value is not None:
                values[run["repeat"]] = value
    return values


def summarize(runs: Sequence[Run], metrics: dict[str, Sequence[Metric]]) -> list[dict[str, Any]]:
    """One row per (bench, case, side, metric): median, min, max over the repeats,
    and for the other sides the ratio conveyor/side of each repeat pair."""
    rows = []
    for (bench, case), labels in _groups(runs).items():
        for metric in metrics.get(bench, ()):
            ours = _values(runs, bench, case, CONVEYOR, metric.key)
            for label in labels:
                values = _values(runs, bench, case, label, metric.key)
                if not values:
                    continue
                ordered = [values[r] for r in sorted(values)]
                ratios = [ours[r] / values[r] for r in sorted(values) if r in ours and values[r]]
                rows.append(
                    {
                        "bench": bench,
                        "case": case,
                        "side": label,
                        "metric": metric.key,
                        "label": metric.label,
                        "headline": metric.headline,
                        "median": statistics.median(ordered),
                        "min": min(ordered),
                        "max": max(ordered),
                        "values": ordered,
                        "conveyor_ratio": None if label == CONVEYOR else ratios,
                    }
                )
    return rows


def format_number(value: Optional[float]) -> str:
    """A figure with 3 significant digits (whole numbers from 100 up); "-" for None."""
    if value is None:
        return "-"
    if abs(value) >= 100:
        return f"{value:.0f}"
    if abs(value) >= 10:
        return f"{value:.1f}"
    return f"{value:.3g}" if abs(value) < 1 else f"{value:.2f}"


def format_table(rows: Sequence[dict[str, Any]], bench: str) -> str:
    """The table of one benchmark's summary rows."""
    header = ("case", "side", "figure", "median", "min", "max", "conveyor/side per repeat")
    lines = [header]
    for row in rows:
        if row["bench"] != bench:
            continue
        ratios = row["conveyor_ratio"]
        ratio_text = "" if ratios is None else (" ".join(f"{r:.2f}" for r in ratios) or "-")
        lines.append(
            (
                row["case"],
                row["side"],
                row["label"],
                format_number(row["median"]),
                format_number(row["min"]),
                format_number(row["max"]),
                ratio_text,
            )
        )
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    rendered = ["  ".join(cell.ljust(width) for cell, width in zip(line, widths)).rstrip() for line in lines]
    rendered.insert(1, "  ".join("-" * width for width in widths))
    return "\n".join(rendered)


def plot(
    rows: Sequence[dict[str, Any]], path: str, title: str, references: Optional[dict[str, Any]] = None
) -> None:
    """A bar chart per (bench, case) of the headline figure's medians, whiskers
    from min to max; ``references`` maps a bench to (label, value) pairs drawn
    as hatched bars (figures quoted, not measured) and to an ``ideal`` line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    headline = [row for row in rows if row["headline"]]
    panels: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for row in headline:
        panels.setdefault((row["bench"], row["case"]), []).append(row)
    if not panels:
        panels[("no results", "")] = []
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 4.2), squeeze=False)
    for ax, ((bench, case), panel_rows) in zip(axes[0], panels.items()):
        _draw_panel(ax, bench, case, panel_rows, (references or {}).get(bench, {}))
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _draw_panel(
    ax: Any, bench: str, case: str, rows: list[dict[str, Any]], reference: dict[str, Any]
) -> None:
    names = [row["side"] for row in rows]
    medians = [row["median"] for row in rows]
    errors = [
        [m - row["min"] for m, row in zip(medians, rows)],
        [row["max"] - m for m, row in zip(medians, rows)],
    ]
    colours = ["tab:green" if name == CONVEYOR else "tab:blue" for name in names]
    ax.bar(range(len(rows)), medians, yerr=errors, capsize=4, color=colours)
    quoted = reference.get("quoted", [])
    for i, (label, value) in enumerate(quoted, start=len(rows)):
        ax.bar(i, value, color="white", edgecolor="grey", hatch="//")
        names.append(f"{label}\n(field report)")
    if reference.get("ideal") is not None:
        ax.axhline(reference["ideal"], color="black", linestyle="--", linewidth=1, label="ideal")
        ax.legend(fontsize=7)
    ax.set_xticks(range(len(names)))
    ax.set_xticklabels(names, rotation=30, ha="right", fontsize=7)
    ax.set_ylabel(rows[0]["label"] if rows else "")
    ax.set_title(f"{bench} {case}".strip(), fontsize=9)
