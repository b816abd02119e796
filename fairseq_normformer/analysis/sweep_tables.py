"""normformer-analyze sweep: the tables of a sweep directory (normformer-sweep, runs/sweep.py, docs/cluster.md),
as the normformer-analyze commands the recipes ran over it: each scheme's LR grid (lr-grid), every scheme at
its best LR over the seeds, paired by seed against the spec's baseline (ppl-table), each scheme's time to the
baseline's final perplexity (time-to-target), and the spec's own tables. A scheme that diverged (every run of
its grid, or a seed at its best LR) is named in schemes.md, not averaged."""
import json
from pathlib import Path
from typing import List

from ..runs.run_dir import grid_dir, seed_paths

MANIFEST = "sweep.json"  # runs/sweep.py MANIFEST
DIVERGED = "diverged"  # runs/sweep_job.py DIVERGED


def load_manifest(out: Path) -> dict:
    path = Path(out) / MANIFEST
    if not path.exists():
        raise ValueError(f"{out} is not a sweep directory (no {MANIFEST}; normformer-sweep writes it)")
    return json.loads(path.read_text(encoding="utf-8"))


def seed_logs(run_dir: Path, seeds: int) -> List[Path]:
    return seed_paths(run_dir / "train.log", seeds, is_run_dir=False)


class SweepTables:
    """The normformer-analyze commands (argument lists) of one sweep directory, and what diverged."""

    def __init__(self, out: Path):
        self.out, self.m = Path(out), load_manifest(out)
        self.spec, self.seeds = self.m["spec"], self.m["seeds"]
        self.metric = self.spec.get("metric", "ppl")
        self.diverged = {name: self.why_diverged(name) for name in self.spec["schemes"]}
        self.diverged = {name: why for name, why in self.diverged.items() if why}

    def grid_dir(self, name: str, lr: str) -> Path:
        return grid_dir(self.out, self.spec, name, lr)

    def label(self, name: str) -> str:
        return f"{self.spec['schemes'][name].get('label', name)} (lr {self.m['best'][name]})"

    def why_diverged(self, name: str):
        """Why scheme ``name`` has no average (None when it has one)."""
        lrs, best = self.m["lrs"][name], self.m["best"][name]
        if best is None:
            if all((self.grid_dir(name, lr) / DIVERGED).exists() for lr in lrs):
                return f"every LR of its grid ({', '.join(lrs)}) diverged"
            raise ValueError(f"scheme {name}'s grid is not finished: run normformer-sweep again")
        seeds = [k for k, log in enumerate(seed_logs(self.grid_dir(name, best), self.seeds), 1)
                 if (log.parent / DIVERGED).exists()]  # fmt: skip
        return f"diverged at lr {best} with seed {', '.join(map(str, seeds))}" if seeds else None

    def runs(self, label: str, run_dir: Path) -> list:
        return [arg for log in seed_logs(run_dir, self.seeds) for arg in ("--run", f"{label}={log}")]

    def grid_commands(self) -> list:
        updates = self.m["variables"].get("updates")
        commands = []
        for name, scheme in self.spec["schemes"].items():
            if name in self.diverged and self.m["best"][name] is None:
                continue
            runs = [arg for lr in self.m["lrs"][name] for arg in ("--run", f"{lr}={self.grid_dir(name, lr) / 'train.log'}")]
            title = (f"{scheme.get('label', name)}, {self.m['scale']} scale: final validation {self.metric} by LR "
                     f"(seed 1{f', {updates} updates' if updates else ''})")  # fmt: skip
            commands.append(["lr-grid", *runs, "--metric", self.metric, "--out", str(self.out / "grid" / f"{name}.md"),
                             "--title", title])  # fmt: skip
        return commands

    def scheme_commands(self) -> list:
        """schemes.md (ppl-table, the baseline first) and time-to-target of each scheme against the baseline."""
        names = [n for n in self.spec["schemes"] if n not in self.diverged]
        baseline = self.spec.get("baseline", names[0])
        names = [baseline, *(n for n in names if n != baseline)]
        runs = [arg for n in names for arg in self.runs(self.label(n), self.grid_dir(n, self.m["best"][n]))]
        title = self.spec.get("schemes_title", "{scale} scale: final validation perplexity, each at its best LR, {seeds} seeds")
        commands = [["ppl-table", *runs, "--out", str(self.out / "schemes.md"), "--plot", str(self.out / "schemes_curves.png"),
                     "--title", self.fill(title)]]  # fmt: skip
        base_logs = seed_logs(self.grid_dir(baseline, self.m["best"][baseline]), self.seeds)
        for name in names[1:]:
            pairs = zip(base_logs, seed_logs(self.grid_dir(name, self.m["best"][name]), self.seeds))
            labels = f"{self.spec['schemes'][baseline].get('label', baseline)},{self.spec['schemes'][name].get('label', name)}"
            commands.append(["time-to-target", *(a for b, c in pairs for a in ("--baseline", str(b), "--candidate", str(c))),
                             "--labels", labels, "--out-dir", str(self.out / "time_to_target" / name)])  # fmt: skip
        return commands

    def fill(self, text: str) -> str:
        return text.format(**{**self.m["variables"], "scale": self.m["scale"], "seeds": self.seeds, "best": self.m["best"]})

    def row_runs(self, row: dict) -> list:
        """--run arguments of one row of a spec table: a scheme at its best LR, or a variant."""
        name = row["run"]
        if name in self.spec["schemes"]:
            return self.runs(self.fill(row.get("label", self.label(name))), self.grid_dir(name, self.m["best"][name]))
        variant = self.spec["variants"][name]
        return self.runs(self.fill(row.get("label", variant.get("label", name))), self.out / name)

    def table_commands(self) -> list:
        commands = []
        for table, t in self.spec.get("tables", {}).items():
            if any(self.diverged.get(self.spec.get("variants", {}).get(r["run"], {}).get("of", r["run"])) for r in t["rows"]):
                continue  # a row of a diverged scheme: schemes.md names it
            compare = ["--compare-to", self.fill(t["compare_to"])] if t.get("compare_to") else []
            runs = [a for row in t["rows"] for a in self.row_runs(row)]
            commands.append(["ppl-table", *runs, *compare, "--out", str(self.out / f"{table}.md"),
                             "--title", self.fill(t.get("title", table))])  # fmt: skip
            if "grad_curves" in t:
                commands.append(self.grad_curves_command(runs, t["grad_curves"]))
        return commands

    def grad_curves_command(self, runs: list, g: dict) -> list:
        """normformer-analyze grad-curves of a table's runs (their grad_norms.jsonl), as the spec's `grad_curves`."""
        grad_runs = [a.removesuffix("train.log") + "grad_norms.jsonl" if a != "--run" else a for a in runs]
        return ["grad-curves", *grad_runs, "--param", g["param"], "--updates", g["updates"], "--table-window",
                g["table_window"], "--out-dir", str(self.out / g["out_dir"])]  # fmt: skip

    def stability_command(self) -> list:
        """stability.md (lr-table) of the spec's `stability` runs, when the sweep ran them (the CPU scales)."""
        if "stability" not in self.spec or not (self.out / "stability").exists():
            return []
        runs = [a for n, s in self.spec["schemes"].items() for a in ("--run", f"{s.get('label', n)}={self.out / 'stability' / n}")]
        return [["lr-table", *runs, "--out", str(self.out / "stability.md")]]

    def commands(self) -> list:
        return [*self.grid_commands(), *self.scheme_commands(), *self.table_commands(), *self.stability_command()]

    def diverged_note(self) -> str:
        lines = [f"- {self.spec['schemes'][n].get('label', n)}: {why}" for n, why in self.diverged.items()]
        return "\nDiverged, not averaged:\n" + "\n".join(lines) + "\n" if lines else ""
