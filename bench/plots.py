"""PNG plots of a sweep: throughput and TTFT against concurrency or request rate."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def plot_sweep(points: list[dict[str, Any]], axis: str, out_dir: Path) -> list[Path]:
    """Two PNGs: output tok/s and TTFT (mean, p95) against `axis` (concurrency or rate)."""
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    xs = [p[axis] for p in points]
    label = "concurrency" if axis == "concurrency" else "request rate (req/s)"
    written = []
    figure, chart = plt.subplots(figsize=(6, 4))
    chart.plot(xs, [p["output_tok_s"] for p in points], marker="o")
    chart.set_xlabel(label)
    chart.set_ylabel("output tokens / s")
    chart.set_title("Throughput")
    chart.grid(True, alpha=0.3)
    written.append(out_dir / "throughput.png")
    figure.tight_layout()
    figure.savefig(written[-1], dpi=100)
    plt.close(figure)

    figure, chart = plt.subplots(figsize=(6, 4))
    for key in ("mean", "p95"):
        chart.plot(xs, [p["ttft_s"][key] or 0.0 for p in points], marker="o", label=f"TTFT {key}")
    chart.set_xlabel(label)
    chart.set_ylabel("seconds")
    chart.set_title("Time to first token")
    chart.legend()
    chart.grid(True, alpha=0.3)
    written.append(out_dir / "ttft.png")
    figure.tight_layout()
    figure.savefig(written[-1], dpi=100)
    plt.close(figure)
    return written
