"""Which precision a model runs at: its own float, or its int8 copy on the CPU's integer units.

The decision is one unit here, apart from how a session is made (`vcamd.inference.runtime`), how the copy is
built (`vcamd.models.quantize`) and checked (`vcamd.inference.fidelity`), and where it is kept (`vcamd.inference.int8cache`):

* `[models] precision = "float"` — the model file as it is (float32, or float16 weights);
* `"auto"` (the default) — a model's int8 copy (the swapper's, the enhancer's, the face parser's,
  the face detector's: `INT8_ROLES`) where the CPU provider runs it, the CPU has int8
  dot-product instructions (x86: AVX-512 VNNI, AVX-VNNI, AMX; ARM: dotprod) and the copy passed the
  fidelity check on the user's own weights (the detector's is a privacy check: every face the float
  detector finds, found and placed by the copy, `vcamd.inference.detectcheck`); float everywhere else
  (a GPU keeps its float16/float32 path). On the inswapper-sized model the int8 copy runs 3.3–3.6×
  faster on a 2-core AVX-512 VNNI CPU, on SCRFD-2.5G 2.0–2.6× (the smallest crops least)
  (docs/performance.md, "int8 on the CPU"). The recogniser (once per photo and per new face) always runs float;
* `"int8"` — the same, also on a CPU without those instructions (or one that cannot be told), as
  long as the copy passes the check: a copy that would change the face never runs.

Until the copy is built and checked the float model serves; the reason a model runs in float is
always said (`Choice.why`: status' `precision_why`, `vcamd doctor`).
"""

from __future__ import annotations

import logging
import platform
import subprocess
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

from vcamd.inference.detectcheck import Looks
from vcamd.inference.fidelity import Verdict

log = logging.getLogger(__name__)

Runs = Literal["float", "int8"]
"""What a model really runs at: the model file's own precision, or its checked int8 copy."""

CPU_PROVIDER = "CPUExecutionProvider"

INT8_FAMILIES = ("inswapper_128",)
"""Swapper families with an int8 copy. Its calibration feeds the model an aligned crop and the
source's latent, and its check compares identities through the user's recogniser: both were built
and measured on inswapper. The other families (issue 41: converters, a .dfm without a source,
signatures shared by four 256² families) run float until their copies are checked the same way."""


INT8_ROLES = ("swapper", "enhancer", "parser", "detector")
"""The model roles with an int8 copy, each built, calibrated and checked its own way
(`vcamd.models.int8roles`). On a CPU the detector is most of the live loop's own work (its full
looks and crop looks every frame), so its copy counts; the recogniser (run once per photo and per
face newly seen) always runs float."""


def family_has_int8(family: str) -> bool:
    return family in INT8_FAMILIES


def no_int8_for(family: str) -> str:
    """Why a swapper of `family` runs float whatever `[models] precision` says."""
    return f"int8 copies are made for {', '.join(INT8_FAMILIES)} only so far: the {family} swapper runs in float"

X86_INT8_FLAGS = ("avx512_vnni", "avx_vnni", "amx_int8")
"""/proc/cpuinfo flags of the x86 int8 dot-product instructions ONNX Runtime's kernels use."""
ARM_INT8_FEATURES = {"asimddp": "dotprod"}
"""/proc/cpuinfo `Features` of ARM's int8 dot product (SDOT/UDOT), and their usual name."""


@dataclass(frozen=True, slots=True)
class Int8Units:
    """Whether this CPU has int8 dot-product instructions: `features` found, or `known` False when
    it cannot be told here (then neither yes nor no is claimed)."""

    features: tuple[str, ...]
    known: bool = True
    source: str = "/proc/cpuinfo"

    @property
    def present(self) -> bool:
        return bool(self.features)

    def describe(self) -> str:
        if not self.known:
            return f"unknown (cannot be read on {platform.system() or 'this system'} {platform.machine()})"
        if not self.features:
            return f"none ({self.source} lists no VNNI, AMX or dotprod)"
        return ", ".join(self.features)


def int8_units(cpuinfo: str | None = None, machine: str | None = None, system: str | None = None) -> Int8Units:
    """The int8 dot-product instructions of this CPU. Linux: /proc/cpuinfo's flags (x86) or
    Features (ARM); macOS: `sysctl hw.optional.arm.FEAT_DotProd` on Apple silicon; elsewhere
    unknown. `cpuinfo`, `machine`, `system` stand in for this machine's (tests)."""
    system = system or platform.system()
    machine = (machine or platform.machine()).lower()
    if cpuinfo is None and system == "Linux":
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
        except OSError:
            return Int8Units((), known=False)
    if cpuinfo is not None:
        first = cpuinfo.split("\n\n", 1)[0]
        words: set[str] = set()
        for line in first.splitlines():
            key, _, value = line.partition(":")
            if key.strip() in ("flags", "Features"):
                words.update(value.split())
        if not words:
            return Int8Units((), known=False)
        found = [flag for flag in X86_INT8_FLAGS if flag in words]
        found += [name for feature, name in ARM_INT8_FEATURES.items() if feature in words]
        return Int8Units(tuple(found))
    if system == "Darwin" and machine in ("arm64", "aarch64"):
        return _apple_dotprod()
    return Int8Units((), known=False)


def _apple_dotprod() -> Int8Units:
    try:
        done = subprocess.run(["sysctl", "-n", "hw.optional.arm.FEAT_DotProd"], capture_output=True, text=True, timeout=5, check=False)
    except (OSError, subprocess.SubprocessError):
        return Int8Units((), known=False, source="sysctl")
    value = done.stdout.strip()
    if done.returncode != 0 or value not in ("0", "1"):
        return Int8Units((), known=False, source="sysctl")
    return Int8Units(("dotprod",) if value == "1" else (), source="sysctl")


@dataclass(frozen=True, slots=True)
class Choice:
    """The precision one model runs at, and why."""

    runs: Runs
    why: str | None
    """Why it runs at `runs` when that is not the obvious (float where int8 was asked or possible,
    or int8's figures); None where there is nothing to say (float asked for)."""
    build: bool = False
    """An int8 copy is wanted but not built yet: the float model serves while it is built and checked."""
    copy: Path | None = None
    """The checked int8 copy (runs == "int8")."""
    verdict: Verdict | None = None
    """The fidelity check's verdict on the copy, when it has been checked."""

    def now_int8(self, copy: Path, verdict: Verdict) -> Choice:
        """The copy was built, passed the check and runs from now on."""
        return replace(self, runs="int8", build=False, copy=copy, verdict=verdict, why=f"int8 copy checked against float: {verdict.summary}")

    def stays_float(self, why: str, verdict: Verdict | None = None) -> Choice:
        return replace(self, runs="float", build=False, copy=None, why=why, verdict=verdict or self.verdict)

    @property
    def failed_check(self) -> bool:
        """The int8 copy was checked and failed: the float model is the right one for these weights."""
        return self.verdict is not None and not self.verdict.passed


FLOAT = Choice("float", None)


def choose(setting: str, provider: str, units: Int8Units, verdict: Verdict | None, copy: Path | None, *,
           server: str = "") -> Choice:
    """The swapper's precision for `[models] precision = setting` on `provider` (the one that really
    runs it), this CPU's `units`, and what is known of its int8 copy: the check's `verdict` and the
    `copy` (None, None: never built for this model file). With `server` (`[models] server`) the
    swapper runs on that Triton server, as served: no int8 copy here."""
    if setting == "float":
        return FLOAT
    if server:
        return Choice("float", f"the Triton server at {server} runs it ([models] server), as served: int8 is for this CPU's integer units")
    if provider != CPU_PROVIDER:
        return Choice("float", f"{provider} runs it: a GPU keeps its float16/float32 path (int8 is for the CPU's integer units)")
    if setting == "auto" and not units.present:
        if units.known:
            why = "this CPU has no int8 dot-product instructions (VNNI, AMX, dotprod): int8 would gain little; precision = \"int8\" uses it anyway"
        else:
            why = f"whether this CPU has int8 dot-product instructions is {units.describe()}; precision = \"int8\" uses int8 anyway"
        return Choice("float", why)
    if verdict is not None and not verdict.passed:
        return Choice("float", f"its int8 copy failed the fidelity check ({verdict.summary}): float stays", verdict=verdict)
    if verdict is None or copy is None:
        return Choice("float", "its int8 copy is being built and checked; the float model serves meanwhile", build=True)
    return Choice("int8", f"int8 copy checked against float: {verdict.summary}", copy=copy, verdict=verdict)


def role_choice(role: str, setting: str, model: Path, providers: list[str], *, server: str = "", looks: Looks | None = None) -> Choice:
    """`choose` for the `role` model (`INT8_ROLES`) on this machine: the provider a session of `model`
    will run on (the first of `providers`: `Sessions` warns when ONNX Runtime falls back), this CPU's
    units, and the int8 copy kept for this model file under the role's build key
    (`vcamd.inference.int8cache`; looked up without hashing the file). A model on the Triton `server`
    has no local file to look up. `looks`: the detector's, the settings its copy is checked at
    (`vcamd.models.int8detector.looks_for`: part of its build key)."""
    from vcamd.inference import int8cache
    from vcamd.inference.int8recipes import build_key

    if setting == "float" or server:
        return choose(setting, providers[0], Int8Units((), known=False), None, None, server=server)
    units = int8_units()
    kept = int8cache.lookup(model, build_key(needs_reduced_range(units), role, looks))
    return choose(setting, providers[0], units, kept.verdict if kept else None, kept.model if kept else None)


def swapper_choice(setting: str, model: Path, providers: list[str], *, server: str = "") -> Choice:
    """`role_choice` of the swapper."""
    return role_choice("swapper", setting, model, providers, server=server)


def precision_status(choices: dict[str, Choice]) -> tuple[dict[str, str], dict[str, str]]:
    """What each model runs at by role ("float" or "int8": the recogniser always float, the
    `choices` of the models loaded), and why where there is something to say."""
    runs = {"detector": "float", "recognizer": "float"} | {role: choice.runs for role, choice in choices.items()}
    return runs, {role: choice.why for role, choice in choices.items() if choice.why}


def needs_reduced_range(units: Int8Units) -> bool:
    """x86 without VNNI (or AMX): ONNX Runtime's u8×s8 kernels can saturate the 16-bit sums of
    `vpmaddubsw`, so weights are quantised to 7 bits there (its own guidance); with VNNI, ARM or
    where the CPU cannot be told (nothing is claimed), full 8 bits."""
    is_x86 = platform.machine().lower() in ("x86_64", "amd64", "i386", "i686")
    return is_x86 and units.known and not units.present

