"""Plots for bench/results: hand-off latency CDF per library and cycle
throughput bars. Run by bench.py in the bench venv:
    plot.py RESULTS.json OUT_DIR
"""
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

ORDER = ["watchlock-c", "watchlock-py", "redis-py", "python-redis-lock", "pottery", "redisson"]
COLORS = {"watchlock-c": "#1b9e77", "watchlock-py": "#66a61e", "redis-py": "#d95f02",
          "python-redis-lock": "#7570b3", "pottery": "#e7298a", "redisson": "#e6ab02"}


def cdf(res, out_dir):
    modes = [m for m in ("queue", "greedy") if res["handoff"].get(m)]
    if not modes:
        return
    fig, axes = plt.subplots(1, len(modes), figsize=(6.5 * len(modes), 4.5), squeeze=False)
    for ax, mode in zip(axes[0], modes):
        for lib in ORDER:
            r = res["handoff"][mode].get(lib)
            if not r or not r["latencies_ms"]:
                continue
            xs = r["latencies_ms"]
            ys = [(i + 1) / len(xs) for i in range(len(xs))]
            ax.step(xs, ys, where="post", color=COLORS[lib],
                    label=f"{lib} (p50 {r['p50_ms']:.2f} ms, {r['handoffs_per_s']:.0f}/s)")
        ax.set_xscale("log")
        ax.set_xlabel("release -> next holder's acquire (ms, log)")
        ax.set_ylabel("fraction of hand-offs")
        ax.set_title(f"Hand-off latency, {res['handoff_processes']} processes, {mode}")
        ax.axvline(0.3, color="grey", ls=":", lw=1)
        ax.axvline(2.0, color="grey", ls="--", lw=1)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    fig.savefig(os.path.join(out_dir, "handoff_cdf.png"), dpi=110)
    plt.close(fig)


def bars(res, out_dir):
    cyc = res["cycle"].get("cycles", {})
    flo = res["cycle"].get("floors", {})
    libs = [lib for lib in ORDER if lib in cyc]
    if not libs:
        return
    labels = libs + [f"floor: {k}" for k in ("c", "py", "java") if k in flo]
    names = {"c": "hiredis PING", "py": "redis-py PING", "java": "Redisson GET"}
    labels = libs + [f"floor: {names[k]}" for k in ("c", "py", "java") if k in flo]
    vals = [cyc[lib]["ops_per_s"] for lib in libs] + [flo[k]["ops_per_s"] for k in ("c", "py", "java") if k in flo]
    colors = [COLORS[lib] for lib in libs] + ["#bbbbbb"] * (len(labels) - len(libs))
    fig, ax = plt.subplots(figsize=(9, 4.5))
    y = range(len(labels))
    ax.barh(list(y), vals, color=colors)
    for i, v in enumerate(vals):
        ax.text(v, i, f" {v:,.0f}/s ({1e6 / v:.0f} us)", va="center", fontsize=8)
    ax.set_yticks(list(y), labels)
    ax.invert_yaxis()
    ax.set_xlabel("acquire+release cycles per second (floors: single round trips per second)")
    ax.set_title("Uncontended cycle throughput (one thread, loopback)")
    ax.set_xlim(0, max(vals) * 1.35)
    fig.tight_layout()
    fig.savefig(os.path.join(out_dir, "cycle_throughput.png"), dpi=110)
    plt.close(fig)


def main():
    res = json.load(open(sys.argv[1]))
    out_dir = sys.argv[2]
    cdf(res, out_dir)
    bars(res, out_dir)


if __name__ == "__main__":
    main()
