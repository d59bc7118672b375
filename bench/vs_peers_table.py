"""The Markdown table of bench/vs_peers.sh from its raw rows (round, threads, file, figure, engine,
value): medians (min-max) over the rounds; decode also as GB/s (graft's bytes read per token x
tokens/s, the same weights for every engine) and % of the read roofline measured in the same run;
ttft_ms (time to first token, load included) in ms, its ratio ik's time over graft's (> 1: graft first).

Usage: python3 bench/vs_peers_table.py /tmp/vs_peers.tsv
"""
import statistics
import sys
from collections import defaultdict

ENGINES = ["graft", "llama.cpp", "ik_llama.cpp"]


def stat(xs):
    return f"{statistics.median(xs):.1f} ({min(xs):.1f}–{max(xs):.1f})" if xs else "–"


def main(path):
    rows = defaultdict(list)  # (threads, file, figure, engine) -> values
    for line in open(path):
        r, t, f, fig, eng, v = line.rstrip("\n").split("\t")
        try:
            rows[(t, f, fig, eng)].append(float(v))
        except ValueError:
            pass
    roof = {t: statistics.median(v) for (t, f, fig, e), v in rows.items() if fig == "roofline_GBps"}
    print("read roofline (GB/s, median of the rounds): " + ", ".join(f"{t} thread(s) {g:.1f}" for t, g in sorted(roof.items())))
    print()
    print("| file | threads | figure | graft | llama.cpp | ik_llama.cpp | graft / ik |")
    print("|---|---|---|---|---|---|---|")
    keys = sorted({(f, t) for (t, f, fig, e) in rows if f != "-"}, key=lambda k: (k[0], int(k[1])))
    for f, t in keys:
        mb = statistics.median(rows[(t, f, "MB_per_token", "graft")] or [0])
        depth = sorted({fig for (t2, f2, fig, e) in rows if f2 == f and t2 == t and fig.startswith("tg128@")})
        ttft = ["ttft_ms"] if rows[(t, f, "ttft_ms", "graft")] else []
        for fig in ["pp512", "tg128"] + depth + ttft:
            cells, med = [], {}
            for e in ENGINES:
                xs = rows[(t, f, fig, e)]
                med[e] = statistics.median(xs) if xs else None
                cell = stat(xs)
                if fig.startswith("tg128") and xs and mb and t in roof:  # weights only (not the KV at depth)
                    gbs = med[e] * mb / 1000
                    cell += f"<br>{gbs:.1f} GB/s, {100 * gbs / roof[t]:.0f} %"
                cells.append(cell)
            ratio = "–"
            if med["graft"] and med["ik_llama.cpp"]:  # graft's speed over ik's (a time: ik's over graft's)
                ratio = f"{(med['ik_llama.cpp'] / med['graft']) if fig == 'ttft_ms' else (med['graft'] / med['ik_llama.cpp']):.2f}×"
            print(f"| {f} | {t} | {fig} | " + " | ".join(cells) + f" | {ratio} |")
    print()
    per_file = {f: statistics.median(rows[(t, f, "MB_per_token", "graft")]) for f, t in keys
                if rows[(t, f, "MB_per_token", "graft")]}
    print("bytes read per token (graft's count): " + ", ".join(f"{f} {mb:.0f} MB" for f, mb in per_file.items()))


if __name__ == "__main__":
    main(sys.argv[1])
