"""The probes: hooks and patches that record what a training script does.

Installed by ``Probes.install`` and removed by ``Probes.remove``, which
restores every patched attribute and removes every hook, even after an error.
Probes only observe: they never change arguments, results or torch flags.
"""

from __future__ import annotations

import os
import signal
import sys
import sysconfig
import threading
import time
import warnings
import weakref
from typing import Any, Callable, NoReturn, Optional

import torch
import torch.nn.modules.module as _module_hooks  # noqa: E402
import torch.optim.optimizer as _optim_hooks  # noqa: E402
from torch.overrides import TorchFunctionMode
from torch.utils.data import DataLoader, RandomSampler, SequentialSampler
from torch.utils.data import dataloader as _dataloader

import conveyor
from conveyor.doctor.observations import (
    CallSite,
    LoaderInfo,
    ModelInfo,
    Observations,
    OptimizerInfo,
    Site,
    StepRecord,
)
from conveyor.doctor.rules.conveyor_loader import replacement
from conveyor.doctor.rules.worker_trial import WorkerTrial

_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _process_run_delay() -> float:
    """Seconds this process's threads have waited for a CPU (runnable, not
    running), summed over its live threads (Linux schedstat); 0 elsewhere."""
    total = 0
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:
        return 0.0
    for task in tasks:
        try:
            with open(f"/proc/self/task/{task}/schedstat") as f:
                total += int(f.read().split()[1])
        except (OSError, IndexError, ValueError):
            continue  # The thread ended meanwhile, or no schedstat here.
    return total / 1e9


def _cpu_seconds(pids: list[int]) -> float:
    """CPU seconds (user + system) the processes `pids` have used (Linux); 0 elsewhere."""
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])  # utime, stime: fields 14 and 15.
        except (OSError, IndexError, ValueError):
            continue
    return total / _TICKS


class StopScript(BaseException):
    """Raised from the optimizer step hook to stop the script after enough steps.

    A BaseException so the script's own ``except Exception`` does not swallow it.
    A script that catches it anyway (``except BaseException``) gets it again at
    its next ``optimizer.step()``, before the step runs.
    """


#: What the time limit's watchdog sends the main thread. Its default action is
#: to ignore it, so one still on its way when the doctor has put the previous
#: handler back does nothing (SIGALRM's would kill the process), and the
#: script's own alarm()/setitimer() timers are left alone.
_STOP_SIGNAL = signal.SIGURG
#: Seconds between the watchdog's signals while the stop is not delivered yet
#: (the main thread was in the doctor's own code, or in a long C call).
_RESEND_SECONDS = 0.1
#: A script still stepping is stopped at a step end after the time limit, or
#: where it is when no step ends for this many times its longest step (and at
#: least _GRACE_SECONDS) after the last one.
_GRACE_STEPS = 2
_GRACE_SECONDS = 1.0
_DOCTOR_FILES = os.path.dirname(os.path.abspath(__file__)) + os.sep

# Files in these folders are library code, never "the user's code".
_LIBRARY_ROOTS = tuple(
    os.path.normcase(os.path.abspath(p)) + os.sep
    for p in {
        sysconfig.get_paths()["stdlib"],
        sysconfig.get_paths()["purelib"],
        sysconfig.get_paths()["platlib"],
        os.path.dirname(torch.__file__),
        os.path.dirname(conveyor.__file__),
    }
)
_user_files: dict[str, bool] = {}


def _is_doctor_frame(frame: Any) -> bool:
    return frame.f_code.co_filename.startswith(_DOCTOR_FILES)


def is_user_file(filename: str) -> bool:
    """Whether code in ``filename`` is the user's (not a library's, not generated)."""
    known = _user_files.get(filename)
    if known is None:
        path = os.path.normcase(os.path.abspath(filename))
        known = not filename.startswith("<") and not path.startswith(_LIBRARY_ROOTS)
        _user_files[filename] = known
    return known


# Names (func.__name__) the TorchFunctionMode handles; all other calls pass through.
_COPY = {"to", "cuda", "copy_"}
_SYNC = {"item", "tolist", "cpu"}
_ZERO = {"zero_", "fill_"}
_ZEROS = {"zeros", "zeros_like"}
_POINTWISE = {
    *"add sub mul div true_divide pow neg exp log sqrt rsqrt abs sigmoid tanh relu clamp clip where".split(),
    *"add_ sub_ mul_ div_ pow_ neg_ exp_ sqrt_ clamp_ relu_ sigmoid_ tanh_ erf reciprocal square".split(),
    *"__add__ __radd__ __iadd__ __sub__ __rsub__ __isub__ __mul__ __rmul__ __imul__".split(),
    *"__truediv__ __rtruediv__ __itruediv__ __pow__ __rpow__ __neg__".split(),
}
_KINDS = {
    **{name: "pointwise" for name in _POINTWISE},
    **{name: "call" for name in (*_COPY, *_SYNC, *_ZERO, *_ZEROS)},
}
#: Length of a chain of pointwise ops (each using the previous result) worth fusing.
CHAIN_LENGTH = 4


class _Mode(TorchFunctionMode):
    def __init__(self, probes: Probes) -> None:
        super().__init__()
        self.probes = probes

    def __torch_function__(
        self, func: Callable[..., Any], types: Any, args: tuple = (), kwargs: Optional[dict] = None
    ) -> Any:
        kind = _KINDS.get(getattr(func, "__name__", ""))
        if kind is None:  # Most calls: pass straight through.
            return func(*args, **(kwargs or {}))
        if kind == "pointwise":
            return self.probes.pointwise(func, args, kwargs or {})
        return self.probes.call(func.__name__, func, args, kwargs or {})


def _function_modes() -> list[Any]:
    """This thread's TorchFunctionMode stack, bottom first."""
    return [torch._C._get_function_stack_at(i) for i in range(torch._C._len_torch_function_stack())]


def _set_function_modes(modes: list[Any]) -> None:
    """Makes this thread's TorchFunctionMode stack ``modes`` (bottom first): pops
    down to the part it shares with them, pushes the rest (no mode's ``__exit__``
    runs: a mode left entered was never exited by its owner either)."""
    current = _function_modes()
    keep = 0
    while keep < min(len(current), len(modes)) and current[keep] is modes[keep]:
        keep += 1
    for _ in range(len(current) - keep):
        torch._C._pop_torch_function_stack()
    for mode in modes[keep:]:
        torch._C._push_on_torch_function_stack(mode)


def _grad_bytes(owner: Any) -> int:
    """Bytes of the gradients an optimizer's or a module's zero_grad writes."""
    if isinstance(owner, torch.optim.Optimizer):
        params = (p for group in owner.param_groups for p in group["params"])
    else:
        params = owner.parameters()
    return sum(p.grad.numel() * p.grad.element_size() for p in params if p.grad is not None)


def _stop_must_wait(frame: Any) -> bool:
    """Whether a stop raised where ``frame`` runs would land in the doctor's own
    bookkeeping, or in an import: a module left partly initialised breaks every
    later import of it in this process (torch._dynamo, imported by the first
    optimizer step, takes a second). The doctor's bookkeeping is any doctor
    frame between ``frame`` and the user's code that called into it (a hook
    that calls torch: the innermost frame is torch's, the hook's is below);
    the runner's frames below the user's code do not count."""
    in_user_code = False
    while frame is not None:
        filename = frame.f_code.co_filename
        if filename.startswith("<frozen importlib"):
            return True
        if not in_user_code:
            if os.path.abspath(filename).startswith(_DOCTOR_FILES):
                return True
            in_user_code = is_user_file(filename)
        frame = frame.f_back
    return False


def _times(count: int) -> str:
    return "once" if count == 1 else f"{count} times"


def _map_style(dataset: object) -> bool:
    """A dataset a DataLoader reads by index, with a length (not an IterableDataset)."""
    return not isinstance(dataset, torch.utils.data.IterableDataset) and hasattr(dataset, "__len__")


def _is_device(value: object) -> bool:
    return isinstance(value, (str, torch.device, int)) and not isinstance(value, bool)


class Probes:
    """Records into ``obs``; stops the script after ``steps`` steps or ``seconds``."""

    def __init__(self, obs: Observations, *, steps: Optional[int], seconds: Optional[float]) -> None:
        self.obs = obs
        self.max_steps = steps
        self.max_seconds = seconds
        self.script = obs.script
        #: Why the doctor stopped the script (None while it has not).
        self.stop_reason: Optional[str] = None
        #: Stop requests the script caught and went on after (a later step, its own end).
        self.stops_caught = 0
        #: ``optimizer.step()`` calls after the stop, stopped before they ran.
        self.steps_refused = 0
        self._stopped_threads: set[threading.Thread] = set()
        self._signal_pending = False
        self._time_limit_done = threading.Event()
        self._restore: list[Callable[[], None]] = []
        self._mode: Optional[_Mode] = None
        self._found_modes: list[Any] = []
        self._reset_step()
        self._last_run_delay, self._last_worker_cpu = _process_run_delay(), 0.0
        self._start = self._last_step = time.perf_counter()
        # Step 1 starts at the first batch request or forward, not at start-up.
        self._started = False
        self._loading = False
        self._step_suspended = False
        self._depth = 0
        self._tracing: Optional[dict[str, Any]] = None
        self._models: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self._module_sites: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self._loader_sites: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self._loaders: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self._optimizers: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self._optimizer_sites: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self._user_zeros: dict[int, tuple[weakref.ref, Site]] = {}
        self._chain_last: Any = None
        self._chain = 0
        self._last_wait = (0.0, 0.0)  # (start, seconds) of the latest batch wait.
        self._last_forward_end = 0.0  # When the latest top-level forward ended.
        self._eval_forwards = 0  # Forwards in eval mode in a row, since the last training one.
        self._eval_begin = 0.0
        self._eval_waits: list[tuple[float, float]] = []

    # --- where ---------------------------------------------------------------

    def site(self) -> Optional[Site]:
        """The innermost frame in the script, else the innermost user frame."""
        frame = sys._getframe(1)
        fallback = None
        while frame is not None:
            filename = frame.f_code.co_filename
            if filename == self.script:
                return Site(filename, frame.f_lineno)
            if fallback is None and is_user_file(filename):
                fallback = Site(filename, frame.f_lineno)
            frame = frame.f_back
        return fallback

    @staticmethod
    def _caller_is_user() -> Optional[Site]:
        # Frames: 0 this, 1 Probes.call/pointwise, 2 _Mode.__torch_function__, 3 the caller.
        frame = sys._getframe(3)
        if is_user_file(frame.f_code.co_filename):
            return Site(frame.f_code.co_filename, frame.f_lineno)
        return None

    @staticmethod
    def _record(table: dict[Site, CallSite], site: Site, name: str) -> CallSite:
        entry = table.get(site)
        if entry is None:
            entry = table[site] = CallSite(name)
        entry.count += 1
        return entry

    # --- install / remove ----------------------------------------------------

    def install(self) -> None:
        """Installs every hook and patch; ``remove`` undoes them."""
        try:
            self._hook(_optim_hooks.register_optimizer_step_pre_hook(self._step_pre))
            self._hook(_optim_hooks.register_optimizer_step_post_hook(self._step_post))
            self._hook(_module_hooks.register_module_forward_pre_hook(self._forward_pre))
            self._hook(_module_hooks.register_module_forward_hook(self._forward_post, always_call=True))
            self._hook(_module_hooks.register_module_module_registration_hook(self._registered))
            self._patch(DataLoader, "__init__", self._wrap_loader_init)
            self._patch(DataLoader, "__iter__", self._wrap_loader_iter)
            self._patch(_dataloader._BaseDataLoaderIter, "__next__", self._wrap_loader_next)
            self._patch(conveyor.Loader, "__init__", self._wrap_loader_init)
            self._patch(conveyor.Loader, "__iter__", self._wrap_conveyor_iter)
            self._patch(torch.optim.Optimizer, "__init__", self._wrap_optimizer_init)
            self._patch(torch.optim.Optimizer, "zero_grad", self._wrap_zero_grad("optimizer.zero_grad"))
            self._patch(torch.nn.Module, "zero_grad", self._wrap_zero_grad("model.zero_grad"))
            self._patch(torch, "set_anomaly_enabled", self._wrap_debug("anomaly detection"))
            self._patch(torch.autograd, "gradcheck", self._wrap_debug("gradcheck"))
            self._patch(torch.autograd, "gradgradcheck", self._wrap_debug("gradgradcheck"))
            self._patch(warnings, "showwarning", self._wrap_showwarning)
            self._patch(threading, "excepthook", self._wrap_excepthook)
            self._patch(sys, "unraisablehook", self._wrap_unraisablehook)
            self._found_modes = _function_modes()
            self._mode = _Mode(self)
            self._mode.__enter__()
            # Signals reach Python in the main thread only; elsewhere the time
            # limit stops the script at a step end.
            if self.max_seconds is not None and threading.current_thread() is threading.main_thread():
                self._start_time_limit(self.max_seconds)
        except BaseException:
            self.remove()
            raise

    def remove(self) -> None:
        """Removes every hook and restores every patch (in reverse order), and
        leaves the TorchFunctionMode stack as ``install`` found it."""
        # First: no stop may land in the clean-up.
        self._time_limit_done.set()
        self._signal_pending = False
        if self._mode is not None:
            # Not just a pop of the doctor's mode: the script may have left a mode
            # of its own entered above it, or popped modes (the doctor's, its
            # caller's); a step that raised may have left it suspended.
            _set_function_modes(self._found_modes)
            self._mode, self._found_modes = None, []
        while self._restore:
            self._restore.pop()()

    def _mode_on_top(self) -> bool:
        depth = torch._C._len_torch_function_stack()
        return (
            self._mode is not None and depth > 0 and torch._C._get_function_stack_at(depth - 1) is self._mode
        )

    def _suspend_mode(self) -> bool:
        """Takes the mode off the stack (when it is on top); True if it did.

        Where every call is library code (a Dataset's loading, optimizer.step)
        the mode would only add its dispatch cost to each op.
        """
        if not self._mode_on_top():
            return False
        torch._C._pop_torch_function_stack()
        return True

    def _resume_mode(self) -> None:
        torch._C._push_on_torch_function_stack(self._mode)

    def _hook(self, handle: Any) -> None:
        self._restore.append(handle.remove)

    def _patch(self, owner: Any, name: str, wrap: Callable[[Any], Any]) -> None:
        had = name in vars(owner)
        original = vars(owner)[name] if had else getattr(owner, name)
        setattr(owner, name, wrap(original))

        def restore() -> None:
            if had:
                setattr(owner, name, original)
            else:
                delattr(owner, name)

        self._restore.append(restore)

    # --- steps ---------------------------------------------------------------

    def _reset_step(self) -> None:
        self._wait = 0.0
        self._copy = 0.0
        self._evaluation = 0.0

    # --- evaluation between steps ----------------------------------------------
    # A validation loop's time is not the next step's compute. An evaluation
    # is two or more top-level forwards in a row of a model in eval mode or
    # without gradients (one alone is a teacher's or an EMA model's forward
    # inside a training step), from the batch wait before the first to the
    # end of the last; the batch waits inside it are not the step's data wait.

    def _evaluating_forward(self, now: float) -> None:
        if self._eval_forwards == 0:
            start, seconds = self._last_wait
            # The wait that fetched this forward's batch: after the last forward and in this step.
            after_forward = start >= max(self._last_forward_end, self._last_step)
            self._eval_begin = start if after_forward else now
            self._eval_waits = [self._last_wait] if after_forward and seconds > 0 else []
        self._eval_forwards += 1

    def _end_evaluation(self) -> None:
        """Closes the forwards in eval mode seen since the last training forward or step."""
        if self._eval_forwards >= 2:
            end = self._last_forward_end
            waits = sum(seconds for start, seconds in self._eval_waits if start + seconds <= end + 1e-9)
            self._evaluation += end - self._eval_begin
            self._wait = max(0.0, self._wait - waits)
            self.obs.evaluations += 1
            self.obs.evaluation_seconds += end - self._eval_begin
        self._eval_forwards = 0
        self._eval_waits = []

    def _raise_stop(self) -> NoReturn:
        self._stopped_threads.add(threading.current_thread())
        raise StopScript

    def describe_stop(self, ending: str, ended_at_stop: bool) -> str:
        """What ended the run, for ``Observations.stopped``: ``ending`` is the
        script's own end ("finished", "the script exited with code 2", ...);
        ``ended_at_stop`` whether the watched block ended at a stop request."""
        if self.stop_reason is None:
            return ending
        caught = self.stops_caught
        if not ended_at_stop and threading.current_thread() in self._stopped_threads:
            caught += 1  # Stopped here, yet the block went on to another end.
        text = self.stop_reason
        if caught:
            text += f", but the script caught the doctor's stop request {_times(caught)} and kept running"
            if self.steps_refused == 1:
                text += " (1 later optimizer.step() call was stopped before it ran)"
            elif self.steps_refused:
                text += f" ({self.steps_refused} later optimizer.step() calls were stopped before they ran)"
        if ended_at_stop:
            return text + ("; a later stop request ended it" if caught else "")
        if ending != "finished":
            return f"{text}; then {ending}"
        return text + ("; then the script ran to its end" if caught else "")

    def _step_pre(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        if self._step_suspended:  # The previous step raised before its post hook.
            self._step_suspended = False
            self._resume_mode()
        if self.stop_reason is not None:
            # A thread stopped before that steps again caught the stop request
            # (``except BaseException``): stop it again, before this step runs.
            self.stops_caught += threading.current_thread() in self._stopped_threads
            self.steps_refused += 1
            self._raise_stop()
        if optimizer not in self._optimizers:
            defaults = optimizer.defaults
            info = OptimizerInfo(
                type(optimizer).__name__,
                self._optimizer_sites.get(optimizer),
                defaults.get("fused"),
                defaults.get("foreach"),
                "fused" in defaults,
            )
            self._optimizers[optimizer] = info
            self.obs.optimizers.append(info)
        if self._user_zeros:
            self._check_user_zeros(p for group in optimizer.param_groups for p in group["params"])
        # A closure (LBFGS) runs the user's forward and backward inside step().
        if len(args) <= 1 and kwargs.get("closure") is None:  # args[0] is the optimizer.
            self._step_suspended = self._suspend_mode()

    def _worker_pids(self) -> list[int]:
        return [pid for info in self.obs.loaders for pid in info.worker_pids]

    def _step_post(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        if self._step_suspended:
            self._step_suspended = False
            self._resume_mode()
        self._end_evaluation()
        now = time.perf_counter()
        obs = self.obs
        index = len(obs.steps)
        # Read only while DataLoader workers run (cpu-oversubscription's evidence):
        # a file per thread and worker, at each step.
        pids = self._worker_pids()
        run_delay, worker_cpu = self._last_run_delay, 0.0
        if pids:
            run_delay, worker_cpu = _process_run_delay(), _cpu_seconds(pids)
        obs.steps.append(
            StepRecord(
                index,
                now - self._last_step,
                self._wait,
                self._copy,
                max(0.0, run_delay - self._last_run_delay),
                max(0.0, worker_cpu - self._last_worker_cpu),
                self._evaluation,
            )
        )
        if index == 0:
            obs.torch_threads = torch.get_num_threads()
        self._last_step, self._last_run_delay, self._last_worker_cpu = now, run_delay, worker_cpu
        self._reset_step()
        self._chain_last, self._chain = None, 0
        if obs.step_site is None:
            obs.step_site = self.site()
        obs.anomaly_steps += torch.is_anomaly_enabled()
        obs.profiler_steps += bool(torch.autograd.profiler._is_profiler_enabled)
        obs.deterministic_steps += torch.are_deterministic_algorithms_enabled()
        obs.cudnn_benchmark = bool(torch.backends.cudnn.benchmark)
        if self.stop_reason is None:
            if self.max_steps is not None and len(obs.steps) >= self.max_steps:
                self.stop_reason = f"stopped after {len(obs.steps)} steps (--steps {self.max_steps})"
            elif self.max_seconds is not None and now - self._start >= self.max_seconds:
                self.stop_reason = f"stopped after {now - self._start:.1f} s (--seconds {self.max_seconds:g})"
        if self.stop_reason is not None:  # Also a step that began before another thread's stop.
            self._raise_stop()

    # --- the time limit without a step -----------------------------------------

    def _start_time_limit(self, seconds: float) -> None:
        """Stops the script at the time limit even when no step ends (a sleep, a
        loop without steps, a wait): a watchdog thread signals the main thread,
        whose handler raises StopScript where the script is."""
        previous = signal.signal(_STOP_SIGNAL, self._on_stop_signal)
        # None: a handler not installed from Python, which cannot be put back.
        self._restore.append(
            lambda: signal.signal(_STOP_SIGNAL, signal.SIG_DFL if previous is None else previous)
        )
        watchdog = threading.Thread(
            target=self._watch_time,
            args=(seconds, threading.get_ident()),
            name="conveyor-doctor-time-limit",
            daemon=True,
        )
        watchdog.start()
        self._restore.append(watchdog.join)  # Before the handler is put back.

    def _watch_time(self, seconds: float, main: int) -> None:
        wait = seconds
        while not self._time_limit_done.wait(wait):
            wait = _RESEND_SECONDS
            if self.stop_reason is None:
                due = self._time_limit_due(seconds) - time.perf_counter()
                if due > 0:
                    wait = due
                    continue
                self._signal_pending = True
            if self._signal_pending:
                signal.pthread_kill(main, _STOP_SIGNAL)

    def _time_limit_due(self, seconds: float) -> float:
        """When the time limit stops the script where it is: at ``seconds``, or
        later while a step may still end (see _GRACE_STEPS)."""
        due = self._start + seconds
        steps = self.obs.measured_steps()
        if steps:
            grace = max(_GRACE_SECONDS, _GRACE_STEPS * max(s.seconds for s in steps))
            due = max(due, self._last_step + grace)
        return due

    def _on_stop_signal(self, signum: int, frame: Any) -> None:
        if not self._signal_pending or self._time_limit_done.is_set():
            return  # Late: the run is over.
        if _stop_must_wait(frame):
            return  # The watchdog sends it again.
        self._signal_pending = False
        if self.stop_reason is None:
            self.stop_reason = self._time_limit_reason()
        self._raise_stop()

    def _time_limit_reason(self) -> str:
        now = time.perf_counter()
        since = (
            f"{now - self._last_step:.1f} s after the last optimizer step ended"
            if self.obs.steps
            else "before any optimizer step"
        )
        limit = f"--seconds {self.max_seconds:g}"
        return f"stopped by the time limit after {now - self._start:.1f} s ({limit}), {since}"

    def _wrap_unraisablehook(self, original: Callable[[Any], None]) -> Callable[[Any], None]:
        def unraisablehook(unraisable: Any) -> None:
            if not isinstance(unraisable.exc_value, StopScript):
                original(unraisable)
            elif self.max_seconds is not None:
                # The time limit's stop landed where Python cannot raise it (a
                # __del__, a weakref callback): nothing printed, sent again.
                self._signal_pending = True

        return unraisablehook

    @staticmethod
    def _wrap_showwarning(original: Callable[..., None]) -> Callable[..., None]:
        """Warnings that a library raises for its caller (``stacklevel``) point
        where they would without the doctor: its wrappers add frames, which
        would shift the warning onto the wrapper or onto the library."""

        def showwarning(
            message: Any, category: Any, filename: str, lineno: int, file: Any = None, line: Any = None
        ) -> None:
            # The frames from the one that called warn() outward (this hook and
            # the warnings module's own frames left out).
            frame = sys._getframe(1)
            while frame is not None and frame.f_code.co_filename == warnings.__file__:
                frame = frame.f_back
            chain = []
            while frame is not None:
                chain.append(frame)
                frame = frame.f_back
            landed = next(
                (i for i, f in enumerate(chain) if f.f_code.co_filename == filename and f.f_lineno == lineno),
                None,
            )
            wrappers = [] if landed is None else [f for f in chain[: landed + 1] if _is_doctor_frame(f)]
            if wrappers:
                # The frame the same stacklevel reaches when the doctor's frames are not counted.
                outside = [f for f in chain if not _is_doctor_frame(f)]
                if landed < len(outside):
                    target = outside[landed]
                    filename, lineno, line = target.f_code.co_filename, target.f_lineno, None
            original(message, category, filename, lineno, file, line)

        return showwarning

    def _wrap_excepthook(self, original: Callable[[Any], None]) -> Callable[[Any], None]:
        def excepthook(args: Any) -> None:
            # A thread the doctor stopped at a step (a script training in a
            # thread): a clean stop, no traceback.
            if not issubclass(args.exc_type, StopScript):
                original(args)

        return excepthook

    # --- modules -------------------------------------------------------------

    def _registered(self, parent: Any, name: str, child: Any) -> None:
        if child is not None and child not in self._module_sites:
            self._module_sites[child] = self.site()
        if isinstance(parent, torch.nn.DataParallel) and name == "module":
            site = self.site()
            if site is not None and site not in self.obs.data_parallel:
                self.obs.data_parallel.append(site)

    def _forward_pre(self, module: Any, args: tuple) -> None:
        self._depth += 1
        if not self._started:
            self._started, self._last_step = True, time.perf_counter()
        if self._depth == 1:
            self._top_level_call(module, args)
        elif self._tracing is not None:
            self._trace(module, args)

    def _forward_post(self, module: Any, args: tuple, output: Any) -> None:
        self._depth = max(0, self._depth - 1)
        if self._depth == 0:
            self._last_forward_end = time.perf_counter()
        if self._tracing is not None:
            if self._depth == 0:
                self._tracing = None
            elif isinstance(module, torch.nn.modules.conv._ConvNd) and module.bias is not None:
                self._tracing["conv"] = (module, output)

    def _trace(self, module: Any, args: tuple) -> None:
        # Conv (bias=True) whose output is the very tensor a BatchNorm takes.
        if isinstance(module, torch.nn.modules.batchnorm._BatchNorm):
            conv = self._tracing.get("conv") if self._tracing else None
            if conv is not None and args and args[0] is conv[1]:
                names = self._tracing["names"]
                self.obs.conv_bn.append(
                    (
                        names.get(conv[0], type(conv[0]).__name__),
                        names.get(module, type(module).__name__),
                        self._module_sites.get(conv[0]),
                        "traced at the first forward: the BatchNorm's input is the conv's output",
                    )
                )

    def _top_level_call(self, module: Any, args: tuple) -> None:
        parameter = next(module.parameters(), None)
        if parameter is None:
            return  # A loss or an activation called on its own.
        info = self._models.get(module)
        if info is None:
            info = ModelInfo(type(module).__name__, self.site())
            info.has_conv = any(isinstance(m, torch.nn.modules.conv._ConvNd) for m in module.modules())
            info.on_cuda = parameter.is_cuda
            self._models[module] = info
            self.obs.models.append(info)
            names = {m: n or type(m).__name__ for n, m in module.named_modules()}
            self._tracing = {"names": names, "conv": None}
        info.calls += 1
        grad = torch.is_grad_enabled() and not torch.is_inference_mode_enabled()
        if module.training and grad:
            self._end_evaluation()
        else:
            self._evaluating_forward(time.perf_counter())
        if module.training:
            info.train_calls += 1
        elif grad and parameter.requires_grad:
            site = self.site()
            if site is not None:
                self._record(self.obs.eval_with_grad, site, type(module).__name__)
        if not module.training:
            return
        if torch.is_autocast_enabled("cuda") or torch.is_autocast_enabled("cpu"):
            info.autocast_calls += 1
        info.cudnn_benchmark_calls += bool(torch.backends.cudnn.benchmark)
        first = args[0] if args else None
        if isinstance(first, torch.Tensor):
            info.input_shapes.add(tuple(first.shape))
        if info.channels_last is None and info.has_conv:
            # Conv activations follow the weights' memory format.
            weights = [m.weight for m in module.modules() if isinstance(m, torch.nn.Conv2d)]
            info.channels_last = bool(weights) and all(
                w.is_contiguous(memory_format=torch.channels_last) for w in weights
            )

    # --- loaders -------------------------------------------------------------

    def _wrap_loader_init(self, original: Callable[..., Any]) -> Callable[..., Any]:
        probes = self

        def __init__(loader: Any, *args: Any, **kwargs: Any) -> None:
            original(loader, *args, **kwargs)
            probes._loader_sites[loader] = probes.site()

        return __init__

    def _loader_info(self, loader: Any, kind: str, **settings: Any) -> LoaderInfo:
        info = self._loaders.get(loader)
        if info is None:
            info = LoaderInfo(kind, self._loader_sites.get(loader) or self.site(), **settings)
            self._loaders[loader] = info
            self.obs.loaders.append(info)
        return info

    def _wrap_loader_iter(self, original: Callable[..., Any]) -> Callable[..., Any]:
        probes = self

        def __iter__(loader: Any) -> Any:
            start = time.perf_counter()
            if not probes._started:
                probes._started, probes._last_step = True, start
            iterator = original(loader)  # Starts worker processes unless persistent.
            seconds = time.perf_counter() - start
            probes._wait += seconds
            info = probes._loader_info(
                loader,
                "DataLoader",
                num_workers=loader.num_workers,
                pin_memory=loader.pin_memory,
                persistent_workers=loader.persistent_workers,
                batch_size=loader.batch_size,
            )
            if info.epochs == 0:
                info.conveyor, info.conveyor_trial = replacement(
                    loader.dataset,
                    batch_size=loader.batch_size,
                    shuffle=isinstance(loader.sampler, RandomSampler),
                    drop_last=bool(loader.drop_last),
                    # A sampler of the user's own (weighted, a subset) goes
                    # into the replacement too; the default ones are shuffle.
                    sampler=None
                    if isinstance(loader.sampler, (RandomSampler, SequentialSampler))
                    else type(loader.sampler).__name__,
                )
                if loader.num_workers == 0 and loader.batch_size and _map_style(loader.dataset):
                    info.worker_trial = WorkerTrial(
                        loader.dataset, loader.batch_size, loader.collate_fn, bool(loader.drop_last)
                    )
            info.epochs += 1
            info.start_seconds.append(seconds)
            # The workers of this pass (persistent ones are the same processes).
            info.worker_pids = [w.pid for w in getattr(iterator, "_workers", []) if w.pid is not None]
            iterator._conveyor_doctor = (info, info.epochs)
            return iterator

        return __iter__

    def _waited(self, info: LoaderInfo, seconds: float, first: bool) -> None:
        self._last_wait = (time.perf_counter() - seconds, seconds)
        if self._eval_forwards:
            self._eval_waits.append(self._last_wait)
        info.batches += 1
        info.wait += seconds
        (info.first_waits if first else info.steady_waits).append(seconds)
        if not first:  # Start-up waits are the persistent-workers rule's, not a stall.
            step = len(self.obs.steps)
            info.step_waits[step] = info.step_waits.get(step, 0.0) + seconds
        self._wait += seconds

    def _wrap_loader_next(self, original: Callable[..., Any]) -> Callable[..., Any]:
        probes = self

        def __next__(iterator: Any) -> Any:
            start = time.perf_counter()
            if not probes._started:
                probes._started, probes._last_step = True, start
            # Calls made while loading (a Dataset's own .cpu()/.to()/math on
            # host tensors) are not the training loop's syncs, copies or chains.
            loading, probes._loading = probes._loading, True
            suspended = probes._suspend_mode()
            try:
                batch = original(iterator)
            finally:
                probes._loading = loading
                if suspended:
                    probes._resume_mode()
            seconds = time.perf_counter() - start
            tag = getattr(iterator, "_conveyor_doctor", None)
            if tag is not None:
                probes._waited(tag[0], seconds, iterator._num_yielded == 1)
            return batch

        return __next__

    def _wrap_conveyor_iter(self, original: Callable[..., Any]) -> Callable[..., Any]:
        probes = self

        def __iter__(loader: Any) -> Any:
            batches = original(loader)
            info = probes._loader_info(loader, "conveyor.Loader")
            info.epochs += 1
            return probes._timed(batches, info)

        return __iter__

    def _timed(self, batches: Any, info: LoaderInfo) -> Any:
        first = True
        try:
            while True:
                start = time.perf_counter()
                if not self._started:
                    self._started, self._last_step = True, start
                try:
                    batch = next(batches)
                except StopIteration:
                    return
                self._waited(info, time.perf_counter() - start, first)
                first = False
                yield batch
        finally:
            batches.close()

    # --- optimizers, zeroed grads, debug APIs ----------------------------------

    def _wrap_optimizer_init(self, original: Callable[..., Any]) -> Callable[..., Any]:
        probes = self

        def __init__(optimizer: Any, *args: Any, **kwargs: Any) -> None:
            original(optimizer, *args, **kwargs)
            if optimizer not in probes._optimizer_sites:
                probes._optimizer_sites[optimizer] = probes.site()

        return __init__

    def _wrap_zero_grad(self, label: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        probes = self

        def wrap(original: Callable[..., Any]) -> Callable[..., Any]:
            def zero_grad(owner: Any, set_to_none: bool = True) -> None:
                if not set_to_none:
                    site = probes.site()
                    if site is not None:
                        entry = probes._record(probes.obs.zero_grads, site, f"{label}(set_to_none=False)")
                        entry.steps.add(len(probes.obs.steps))
                        entry.nbytes += _grad_bytes(owner)
                return original(owner, set_to_none)

            return zero_grad

        return wrap

    def _wrap_debug(self, label: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        probes = self

        def wrap(original: Callable[..., Any]) -> Callable[..., Any]:
            def debug(*args: Any, **kwargs: Any) -> Any:
                enabling = label != "anomaly detection" or bool(args[0] if args else kwargs.get("enabled"))
                site = probes.site() if enabling else None
                if site is not None:
                    entry = probes._record(probes.obs.debug, site, label)
                    entry.steps.add(len(probes.obs.steps))
                return original(*args, **kwargs)

            return debug

        return wrap

    def _is_grad(self, tensor: Any) -> bool:
        for optimizer in list(self._optimizers.keys()):
            for group in optimizer.param_groups:
                for p in group["params"]:
                    if p.grad is tensor:
                        return True
        return False

    def _check_user_zeros(self, params: Any) -> None:
        # Backward accumulates into the assigned tensor in place: it is still p.grad here.
        for p in params:
            grad = p.grad
            entry = self._user_zeros.get(id(grad)) if grad is not None else None
            if entry is not None and entry[0]() is grad:
                found = self._record(self.obs.zero_grads, entry[1], "p.grad = torch.zeros...")
                found.steps.add(len(self.obs.steps))
                found.nbytes += grad.numel() * grad.element_size()
                del self._user_zeros[id(grad)]

    # --- calls seen by the TorchFunctionMode -----------------------------------

    def call(self, name: str, func: Callable[..., Any], args: tuple, kwargs: dict) -> Any:
        """A device copy, a host sync or a zeroing call (see _Mode)."""
        if self._loading:
            return func(*args, **kwargs)
        site = self._caller_is_user()
        if site is None:
            return func(*args, **kwargs)
        step = len(self.obs.steps)
        if name in _SYNC:
            entry = self._record(self.obs.syncs, site, f".{name}()")
            entry.steps.add(step)
            return func(*args, **kwargs)
        if name in _ZEROS:
            # Remembered: assigned to a .grad, it is found at the next step.
            result = func(*args, **kwargs)
            key = id(result)
            self._user_zeros[key] = (weakref.ref(result, lambda _: self._user_zeros.pop(key, None)), site)
            return result
        if name in _ZERO:
            zeroing = name == "zero_" or (
                len(args) > 1 and not isinstance(args[1], torch.Tensor) and args[1] == 0
            )
            if zeroing and args and self._is_grad(args[0]):
                entry = self._record(self.obs.zero_grads, site, f"p.grad.{name}()")
                entry.steps.add(step)
                entry.nbytes += args[0].numel() * args[0].element_size()
            return func(*args, **kwargs)
        # A copy: .to(device...), .cuda(), dst.copy_(src) across devices.
        if name == "to":
            device = kwargs.get("device", args[1] if len(args) > 1 else None)
            if isinstance(device, torch.Tensor):
                device = device.device
            if not _is_device(device):
                return func(*args, **kwargs)
            non_blocking = bool(kwargs.get("non_blocking", False))
        elif name == "cuda":
            non_blocking = bool(kwargs.get("non_blocking", False))
        else:
            if len(args) < 2 or not isinstance(args[1], torch.Tensor) or args[0].device == args[1].device:
                return func(*args, **kwargs)
            non_blocking = bool(kwargs.get("non_blocking", args[2] if len(args) > 2 else False))
        start = time.perf_counter()
        result = func(*args, **kwargs)
        seconds = time.perf_counter() - start
        self._copy += seconds
        entry = self._record(self.obs.copies, site, f".{name}()")
        entry.steps.add(step)
        entry.seconds += seconds
        entry.blocking += not non_blocking
        return result

    def pointwise(self, func: Callable[..., Any], args: tuple, kwargs: dict) -> Any:
        """A pointwise op: follows chains of them in the user's code."""
        result = func(*args, **kwargs)
        if self._loading:
            return result
        # Frames: 0 this, 1 _Mode.__torch_function__, 2 the caller. No Site
        # object until a chain is long enough: this runs for every pointwise op.
        frame = sys._getframe(2)
        if not is_user_file(frame.f_code.co_filename):
            return result
        last = self._chain_last
        if last is not None and any(a is last for a in args):
            self._chain += 1
        else:
            self._chain = 1
        self._chain_last = result
        if self._chain >= CHAIN_LENGTH:
            site = Site(frame.f_code.co_filename, frame.f_lineno)
            entry = self.obs.chains.get(site)
            if entry is None:
                entry = self.obs.chains[site] = CallSite(getattr(func, "__name__", "op"))
            if self._chain == CHAIN_LENGTH:
                entry.count += 1
            entry.longest = max(entry.longest, self._chain)
        return result
