"""The GPU's SM clock before anything is measured, and while it is: is it free to boost, or held?

An ``ncu`` killed while it profiled with its clocks locked leaves the SM clock locked for every later process
(measured on the project's H200: 1,500 MHz, idle included, until the machine was given back); administrators lock
clocks (``nvidia-smi -lgc``) and clouds cap power on purpose. NVML's clock-event reasons do not show such a lock
(they read "GPU idle"), so :func:`read_clock_state` looks at what the clock does: sampled for about a second while
no process uses the GPU, a free GPU idles far below its maximum; a held one stays at its lock. Where cupti-python
13.4 and libcupti 13.4 are here, CUPTI's device-global clock-control status is read too, in a child process
(``python -m nspy_tutorial.clock``; it needs a CUDA context, which setup must not create before ``import nsight``):
it read ``BOOST_ENABLED`` idle and ``LOCKED`` while an ``ncu --clock-control base`` profiled on the H200."""

import dataclasses
import json
import os
import subprocess
import sys
import threading
import time

HELD_FRACTION = 0.5  # an idle SM clock that stays at or above this share of the maximum is held
SAMPLE_SECONDS, LONGEST_SECONDS, INTERVAL = 1.0, 4.0, 0.05  # up to 4 s when it looks held or lingers at its boost
AT_MAX_MHZ = 15  # within this of the maximum: the boost clock itself (it lingers about 2 s after work)
CUPTI_HELD = ("LOCKED", "LOCKED_TO_FLOOR", "BOOST_DISABLED")  # cupti.ClockControlStatus names that mean held
CUPTI_TIMEOUT = 60


@dataclasses.dataclass(frozen=True)
class ClockState:
    """What the SM clock did while setup watched it, and what NVML (and CUPTI, where here) say of it."""

    state: str  # "free", "held", "busy" (another process used the GPU: idle clock unknown) or "unknown"
    idle_mhz: tuple[int, int] | None = None  # lowest and highest SM clock sampled
    max_mhz: int | None = None  # the GPU's maximum SM clock (NVML)
    app_mhz: int | None = None  # the applications clock now, and its default: lower means set by someone
    default_app_mhz: int | None = None
    power_w: float | None = None  # the enforced power limit, and the default one: lower means capped
    default_power_w: float | None = None
    cupti: str | None = None  # CUPTI's clock-control status name, or why it was not read
    seconds: float = 0.0  # how long the clock was sampled
    why: str = ""  # for "unknown": what failed

    @property
    def held_mhz(self) -> int | None:
        """The SM clock the GPU is held at (the highest idle sample), else None (also where only CUPTI saw it)."""
        seen = self.idle_mhz and self.max_mhz and self.idle_mhz[0] >= HELD_FRACTION * self.max_mhz
        return self.idle_mhz[1] if self.state == "held" and seen else None

    @property
    def ratio(self) -> float | None:
        """held / maximum: about how far below the datasheet every figure will sit; None unless held."""
        return self.held_mhz / self.max_mhz if self.held_mhz and self.max_mhz else None

    def lines(self) -> list[str]:
        """The banner's lines: free, or held and what that does to every figure, then what else caps it."""
        low, high = self.idle_mhz or (None, None)
        if self.state == "free" and self.max_mhz - low <= AT_MAX_MHZ:
            found = [f"free: at its boost clock, {high:,} MHz, while idle (recent work); it boosts to {self.max_mhz:,}"]
        elif self.state == "free":
            found = [f"free: idles at {low:,}-{high:,} MHz, boosts to {self.max_mhz:,} MHz"]
        elif self.state == "held" and not self.held_mhz:
            found = [f"HELD, says CUPTI's clock-control status ({self.cupti}), though the SM clock sampled "
                     f"{low:,}-{high:,} MHz;", "figures below may sit under the datasheet.", *HELD_REMEDY]
        elif self.state == "held":
            found = [f"HELD at {high:,} MHz even idle ({self.ratio:.0%} of its {self.max_mhz:,} MHz): locked by an "
                     "administrator", "or by a profiler that was killed; figures below sit under the datasheet by "
                     "about that ratio.", *HELD_REMEDY]
        elif self.state == "busy":
            found = ["not judged: another process used the GPU while setup watched its clock"]
        else:
            found = [f"unknown: {self.why}"]
        if self.cupti:
            found.append(f"CUPTI's clock-control status: {self.cupti}")
        if self.app_mhz and self.default_app_mhz and self.app_mhz < self.default_app_mhz:  # set by someone
            found.append(f"applications clock set to {self.app_mhz:,} of {self.default_app_mhz:,} MHz")
        if self.power_w and self.default_power_w and self.power_w < self.default_power_w - 0.5:
            found.append(f"power capped at {self.power_w:.0f} W of its default {self.default_power_w:.0f} W")
        return found

    def line(self) -> str:
        return " ".join(self.lines())

    def record(self) -> dict:
        """A JSON-ready record for the evidence folder, with the banner line."""
        return {**dataclasses.asdict(self), "line": self.line()}


HELD_REMEDY = ("A lock that a killed ncu left clears with `ncu --clock-control reset` where that ncu has it",
               "(notebook 04 shows it), else with a new machine or runtime.")


def classify(samples: list[tuple[int, int]], max_mhz: int | None) -> str:
    """"free", "held" or "busy" from (SM clock MHz, utilisation %) samples taken about every 50 ms.

    Busy if any sample saw the GPU in use (its idle clock is then unknown). Free if the clock went below
    ``HELD_FRACTION`` of the maximum (a free GPU idles low), or stayed at the maximum itself (it lingers there about
    2 s after work; a lock at the maximum would lower no figure either). Held if it stayed between the two."""
    if not samples or not max_mhz:
        return "unknown"
    if any(util > 0 for _, util in samples):
        return "busy"
    low = min(mhz for mhz, _ in samples)
    return "free" if low < HELD_FRACTION * max_mhz or max_mhz - low <= AT_MAX_MHZ else "held"


def sample(pynvml, handle, seconds: float, interval: float = INTERVAL) -> list[tuple[int, int]]:
    """(SM clock MHz, GPU utilisation %) every ``interval`` s for ``seconds``."""
    found, end = [], time.monotonic() + seconds
    while True:
        found.append((pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM),
                      pynvml.nvmlDeviceGetUtilizationRates(handle).gpu))
        if time.monotonic() >= end:
            return found
        time.sleep(interval)


def read_clock_state(pynvml=None, cupti_path: str | None = None) -> ClockState:
    """Watch the SM clock for about a second (up to four while it looks held) without starting CUDA, read the
    applications clocks and power limits, and, with ``cupti_path`` (a libcupti 13.4), CUPTI's status."""
    try:
        if pynvml is None:
            import pynvml
        from nspy_tutorial.gpu_facts import nvml_handle

        pynvml.nvmlInit()
        handle = nvml_handle(pynvml)
        max_mhz = pynvml.nvmlDeviceGetMaxClockInfo(handle, pynvml.NVML_CLOCK_SM)
        samples, start = sample(pynvml, handle, SAMPLE_SECONDS), time.monotonic()
        while time.monotonic() - start < LONGEST_SECONDS - SAMPLE_SECONDS and (
                classify(samples, max_mhz) == "held" or max_mhz - samples[-1][0] <= AT_MAX_MHZ):
            samples += sample(pynvml, handle, 0.5)  # looks held, or still at its boost clock after work
    except Exception as exc:  # no NVML, no GPU, not permitted
        return ClockState("unknown", why=f"NVML: {type(exc).__name__}: {exc}")
    facts = {}
    for name, call in (("app_mhz", lambda: pynvml.nvmlDeviceGetApplicationsClock(handle, pynvml.NVML_CLOCK_SM)),
                       ("default_app_mhz",
                        lambda: pynvml.nvmlDeviceGetDefaultApplicationsClock(handle, pynvml.NVML_CLOCK_SM)),
                       ("power_w", lambda: pynvml.nvmlDeviceGetEnforcedPowerLimit(handle) / 1000),
                       ("default_power_w", lambda: pynvml.nvmlDeviceGetPowerManagementDefaultLimit(handle) / 1000)):
        try:  # each is optional: many GPUs answer NotSupported to some
            facts[name] = call()
        except Exception:
            facts[name] = None
    state = classify(samples, max_mhz)
    cupti = cupti_status(cupti_path) if cupti_path else None
    if state in ("free", "busy") and cupti in CUPTI_HELD:
        state = "held"  # CUPTI saw a lock the idle clock did not show (e.g. one at the clock it idles at)
    mhz = [m for m, _ in samples]
    return ClockState(state, (min(mhz), max(mhz)), max_mhz, cupti=cupti, seconds=len(samples) * INTERVAL, **facts)


def cupti_status(cupti_path: str) -> str:
    """CUPTI's device-global clock-control status name, read in a child process, or why it could not be read."""
    env = {**os.environ, "NSPY_TUTORIAL_CUPTI": cupti_path}
    try:
        done = subprocess.run([sys.executable, "-m", "nspy_tutorial.clock"], capture_output=True, text=True,
                              env=env, timeout=CUPTI_TIMEOUT)
    except subprocess.TimeoutExpired:
        return f"not read: no answer within {CUPTI_TIMEOUT} s"
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        return f"not read: {(done.stderr.strip().splitlines() or ['exit ' + str(done.returncode)])[-1]}"
    return json.loads(lines[-1])["status"]


def _child_status() -> str:
    """In the child: libcupti first, a primary context on CUDA's first visible device, then CUPTI's answer."""
    import ctypes

    ctypes.CDLL(os.environ["NSPY_TUTORIAL_CUPTI"], mode=ctypes.RTLD_GLOBAL)
    cuda = ctypes.CDLL("libcuda.so.1")
    device, context = ctypes.c_int(), ctypes.c_void_p()
    for call, args in (("cuInit", (0,)), ("cuDeviceGet", (ctypes.byref(device), 0)),
                       ("cuDevicePrimaryCtxRetain", (ctypes.byref(context), device))):
        if getattr(cuda, call)(*args) != 0:
            raise RuntimeError(f"{call} failed")
    from cupti import cupti

    return cupti.ClockControlStatus(cupti.clock_control_get_status(context.value)).name


class Sampler:
    """The SM clock sampled by NVML in a thread while a block runs: the clock a CUPTI-timed kernel ran near (CUPTI
    does not measure it). ``with Sampler() as clock: ...`` then ``clock.mhz`` (median, lowest, highest) or None."""

    def __init__(self, interval: float = 0.01):
        self.interval, self.samples, self._stop = interval, [], threading.Event()

    def __enter__(self):
        try:
            import pynvml

            from nspy_tutorial.gpu_facts import nvml_handle

            pynvml.nvmlInit()
            handle = nvml_handle(pynvml)
        except Exception:  # no NVML: mhz stays None
            return self

        def watch() -> None:
            while not self._stop.is_set():
                self.samples.append(pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM))
                self._stop.wait(self.interval)

        self._thread = threading.Thread(target=watch, name="clock-sampler", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if hasattr(self, "_thread"):
            self._thread.join()

    @property
    def mhz(self) -> tuple[float, int, int] | None:
        if not self.samples:
            return None
        ordered = sorted(self.samples)
        return ordered[len(ordered) // 2], ordered[0], ordered[-1]


if __name__ == "__main__":
    print(json.dumps({"status": _child_status()}))
