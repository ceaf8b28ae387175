"""Rules about the model and the training loop's own code: conv bias before
BatchNorm, zeroed gradients, evaluation with autograd on, pointwise chains."""

from __future__ import annotations

from conveyor.doctor.observations import Observations
from conveyor.doctor.report import Finding
from conveyor.doctor.rules.registry import rule


@rule
def conv_bias_before_bn(obs: Observations) -> list[Finding]:
    """A convolution with a bias feeds a BatchNorm directly."""
    return [
        Finding(
            "conv-bias-before-bn",
            "low",
            f"{conv} has a bias but feeds {bn} directly",
            f"{how}: {conv} -> {bn}",
            site,
            "BatchNorm subtracts the mean right away, which cancels the bias: it costs a "
            "broadcast add and its gradient for nothing.",
            "nn.Conv2d(..., bias=False)  # followed by nn.BatchNorm2d",
            "estimated",
            "one elementwise add per activation and its gradient per step",
        )
        for conv, bn, site, how in obs.conv_bn
    ]


@rule
def zero_grad_not_none(obs: Observations) -> list[Finding]:
    """Gradients are zeroed in place instead of set to None."""
    return [
        Finding(
            "zero-grad",
            "low",
            "gradients are zeroed instead of set to None",
            f"{entry.name}: {entry.count} calls",
            site,
            "Zeroing writes every gradient buffer each step and backward then adds into it; with "
            "None, backward writes the gradient directly (one memory pass less).",
            "optimizer.zero_grad()  # set_to_none=True is the default; or: for p in params: p.grad = None",
            "estimated",
            f"a write of {entry.nbytes / max(1, len(entry.steps)) / 1e6:.2f} MB of gradients per step, "
            "and backward writes instead of adding",
            {"calls": entry.count, "bytes_per_step": entry.nbytes // max(1, len(entry.steps))},
        )
        for site, entry in obs.zero_grads.items()
    ]


@rule
def eval_with_grad(obs: Observations) -> list[Finding]:
    """A model in eval() mode runs with autograd recording."""
    return [
        Finding(
            "eval-grad",
            "medium",
            "evaluation runs with autograd on",
            f"{entry.name} in eval() mode was called {entry.count} times with grad enabled",
            site,
            "Outside training autograd still records the graph and keeps activations for a backward "
            "that never comes: more memory and time.",
            "with torch.inference_mode():  # or torch.no_grad()\n    output = model(x)",
            "estimated",
            "no graph recording and no saved activations in evaluation",
            {"calls": entry.count},
        )
        for site, entry in obs.eval_with_grad.items()
    ]


@rule
def compile_fusion(obs: Observations) -> list[Finding]:
    """A chain of pointwise ops that torch.compile would fuse (a suggestion)."""
    return [
        Finding(
            "compile-fusion",
            "suggestion",
            f"a chain of {entry.longest} pointwise ops torch.compile would fuse (suggestion)",
            f"{entry.longest} pointwise ops in a row, each on the previous result, {entry.count} times",
            site,
            "Each pointwise op reads and writes the whole tensor; fused into one kernel the data "
            "passes through memory once. This is a suggestion: compile time and graph breaks apply.",
            "model = torch.compile(model)  # or @torch.compile on the function holding the chain",
            "estimated",
            f"up to {entry.longest - 1} of {entry.longest} memory passes of this tensor",
            {"ops": entry.longest, "chains": entry.count},
        )
        for site, entry in obs.chains.items()
    ]
