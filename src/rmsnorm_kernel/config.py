"""Launch configurations as frozen values, and the one heuristic per kernel that picks them.

A launch's geometry (block width, rows per program, warps, the backward's persistent grid and its
dweight finish) is a :class:`ForwardConfig` or :class:`BackwardConfig`. :func:`forward_config` and
:func:`backward_config` choose one from the problem's shape and device; the launchers in
:mod:`.ops` take an explicit config instead when one is given, so tuning scripts pass configs and
never rebind module globals. Everything a config decides reaches the kernel as a constexpr,
``num_warps`` or the grid, so the compiled-handle cache (:mod:`.launch`) keys on it.

Each heuristic constant below says what was measured to choose it (one H200, bf16, 64M elements
unless stated; ``experiments/kernel_perf/``).
"""

from __future__ import annotations

import dataclasses
import functools

import torch
import triton

from .backend import BACKEND
from .contract import ContractValueError

#: Forward: widest row kept whole in registers. One pass at 32768 columns 77.9 us vs 79.0 us
#: chunked; at 65536 one pass 99.7 us vs 97.3 us in chunks of 16384, so wider rows are read in
#: chunks, twice (the second read mostly hits L2).
MAX_FUSED_N = 32768
#: Chunk width of wider forward rows, at LOOP_WARPS: 16384 x 32 warps was fastest or equal at
#: 65536-262144 columns (97.3 / 108.4 / 108.3 us; 4096 x 8 warps: 123.8 / 120.4 / 162.2 us).
LOOP_BLOCK = 16384
LOOP_WARPS = 32
#: Forward rows this short run several rows per program (rmsnorm_forward_rows_kernel): one row
#: per program reached 834 GB/s at 128 columns and 1632 GB/s at 256, several rows 3.7-3.8 TB/s.
ROWS_MAX_N = 1024
#: Values per program in the several-rows kernel (ROWS * BLOCK): 4096 was fastest or within 2%
#: from 128 to 1024 columns, with 8 warps up to 256 columns and 4 warps above (70.6, 70.0, 72.2,
#: 71.4 us at 128, 256, 512, 1024 columns).
#: At 512 and 1024 columns half that tile (graph replay, tune.py part narrow, 2026-11-30): 131072
#: x 512 4 rows 65.7 us vs 68.7 with 8 (bench: 68.8, Inductor 64.9); 65536 x 1024 2 rows 65.9 vs
#: 67.3 with 4. 256 columns keep 16 rows at 8 warps (65.0 us; 8 rows 65.6-69.2).
ROWS_TILE = 4096
ROWS_TILE_BY_BLOCK = {512: 2048, 1024: 2048}
#: Blocks of 64 and 128 columns: ROWS_SHORT rows per program at ROWS_SHORT_WARPS, at most
#: ROWS_SHORT_TILE_BYTES of x per program (tune.py part narrowfwd, twenty-ninth session,
#: 2026-12-04, graph replay, medians of 3 interleaved rounds; the 4096-value tiles at 8 warps
#: before): bf16 inference 1048576 x 64 64.8 us vs 68.5 (quack 64.5 in the bench), 524288 x 128
#: 65.3 vs 68.7; bf16 with rstd stored 66.7 vs 67.0 and 65.5 vs 66.4; float32 1048576 x 64 (16
#: rows) 127.5 vs 131.3, 524288 x 128 (8 rows: 16 took 130.8) 127.6 vs 131.8.
ROWS_SHORT_BLOCKS = (64, 128)
ROWS_SHORT = 16
ROWS_SHORT_TILE_BYTES = 4096
ROWS_SHORT_WARPS = 4
#: Fewer rows per program while the grid would leave SMs idle: below this many programs per SM
#: (128 x 257 in 16 programs of 8 rows took 2.1 us, one row per program 1.6).
ROWS_MIN_PROGRAMS_PER_SM = 2
#: Where that leaves one row per program, the one-row kernel (rmsnorm_forward_kernel) instead of
#: the several-rows kernel's (1, BLOCK) tile, at these warps by block. Graph replay, interleaved
#: rounds (tune.py part tiny, thirteenth session, 2026-12-01): 128 x 257 fp32 1.58 us (4 warps;
#: 1.60 with 2) vs 1.75 in the rows kernel, Liger 1.60; 256 x 1024 bf16 1.68 us (2 warps; 1.73
#: with 4) vs 1.90, Liger 1.73. Narrower blocks were not measured and keep the rows kernel.
ONE_ROW_SHORT_WARPS = {512: 4, 1024: 2}

#: Backward: widest row kept whole in one program. One pass reaches 3.6 TB/s at 16384 columns (8
#: warps), while 65536 in one pass took 1.5 ms for 1024 rows (spills), so wider rows take the
#: column-tile path (~2.5 TB/s).
MAX_FUSED_N_BWD = 16384
#: Column tile for wider backward rows (after a separate mean(u*x) row reduction).
BWD_TILE = 4096
#: Warps of a column tile: 16 and 32 measured equal (645 us), 4 slower (727 us) at N >= 32768.
BWD_TILE_WARPS = 16
#: Software pipelining of the backward row loop (tl.range num_stages), by row block. Measured at
#: 4096 columns (bf16, CUDA-graph replay, 2 programs per SM): 3 stages 35.8 us vs 40.4 with none
#: at 4096 rows, 120.0 vs 134.7 at 16384 rows; 2 stages were slower than 3 (42.6, 141.8), and
#: earlier slower than none at 8192/16384 columns (159.5 vs 135.8 us, 198.4 vs 154.9), so other
#: blocks keep none. Only from BWD_PIPELINE_MIN_ROWS rows per program (shorter loops, small M,
#: were measured without pipelining only), and not for float64 math.
#: Keyed by (block, bytes per input value): float32 rows at 4096 columns took 218.0 us with 2
#: stages against 225.3 with 3 (16384 rows, 2 programs per SM, 8 warps; tune.py part wide); with
#: float32 partials (below) 212.8 vs 212.1 without pipelining, equal.
#: Narrower 16-bit rows at large M (tune.py part pipe, backward alone, bf16, 2026-11-30, with
#: PROGRAMS_PER_SM below): 131072 x 512 3 stages 126.6 us vs 155.6 before (8 per SM, none);
#: 65536 x 1024 4 stages 122.5 vs 130.0; 16384 x 2048 61.9 vs 73.0 and 32768 x 2048 110.9 vs
#: 128.1 (4 stages). 256 columns: none (16 per SM 160.7 us, 4 stages 181.1).
BWD_STAGES = 1
BWD_PIPELINE = {(512, 2): 3, (1024, 2): 4, (2048, 2): 4, (4096, 2): 3, (4096, 4): 2}
BWD_PIPELINE_MIN_ROWS = 16
#: Backward persistent grid: programs per SM, by row block. Short rows need more programs in
#: flight to keep memory busy: 8 per SM at 1024 columns took 456 us vs 948 us with 2 (the previous
#: kernel, ~1.5 GB moved), and 4 was best at 2048. At 4096 columns, through explicit configs
#: (tune.py part bwdq, graph replay, 2026-11-30): 2 per SM with 3 stages 35.8 / 120.0 us at
#: 4096 / 16384 rows, against 47.1 / 123.0 with 3 per SM and none (no other count came closer).
#: At 8192 and 16384 columns (tune.py part wide, graph replay, backward alone, bf16, 2026-11-30;
#: warps from BWD_WARPS): 32768 x 8192 2 per SM 451.7 us, 3 493.6, 4 472.6, 1 (16 warps) 505.1;
#: 8192 x 8192 117.0 / 134.5 (4) / 137.0 (1); 8192 x 16384 1 per SM 229.3, 2 235.9.
#: The grid size fixes the order of dweight additions, so it depends on shapes only, never timing.
#: With the pipelined row loop (BWD_PIPELINE, tune.py part pipe): 262144 x 256 16 per SM 160.7
#: us vs 233.5 with 8; 512 columns 8 per SM; 1024: 4 (122.5 us vs 135.8 at 16, 138.9 at 2);
#: 2048: 2 (61.9 us vs 71.4 at 4).
PROGRAMS_PER_SM = {256: 16, 512: 8, 1024: 4, 2048: 2, 4096: 2, 8192: 2}  # wider: 1; narrower: 8
#: Warps of the one-tile backward where the rule of _bwd_warps lost (float32 rows only: float64
#: dweight rows double the live registers). 8192 columns: 4 warps 451.7 us at 32768 rows vs
#: 8 / 16 warps 505-570 (4 warps spill 64 bytes, 2 programs per SM still fit: more rows in
#: flight); 16384: 8 warps 229.3 us vs 245.9 with 16 at 8192 rows (tune.py part wide).
BWD_WARPS = {8192: 4, 16384: 8}
#: Short rows at large M: (rows per step, programs per SM, stages) of the several-rows backward
#: (rmsnorm_backward_rows_kernel, 4 warps), keyed like BWD_PIPELINE. 16-bit rows: graph replay,
#: backward alone, bf16, in-launch tree (tune.py part rowsbwd, 2026-11-30): 262144 x 256 4 rows
#: per step, 4 per SM, 3 stages 122.9 us vs 159.0 one row per step (2 rows, 8 per SM: 123.9;
#: without pipelining none under 149); 131072 x 512 122.9 vs 126.8. Not at 1024 columns (2 rows
#: 122.4 vs 122.1, 4 rows 127+) nor 2048 (72-200 vs 62.0).
#: float32 rows (part rowsbwd32, 32M elements): 32768 x 1024 2 rows, 8 per SM, 3 stages 117.0 us
#: vs 127.9 one row; 65536 x 512 4 rows 112.4 vs 117.9; 256 columns within 3% (110.9 vs 114.0):
#: one row per step there.
#: 128 and 64 columns (the per-head q/k norms of Qwen3-style models; tune.py part narrow,
#: twenty-eighth session, 2026-12-04, experiments/kernel_perf/results/h200_2026-12-04c): 16 rows
#: per step, 4 per SM, 3 stages, the tree: 524288 x 128 120.8 us vs 383.1 one row per step,
#: 65536 x 128 25.8 vs 58.2, 1048576 x 64 120.2 vs 717.1 (the pointer kernels' figures: a
#: Hopper GPU takes BWD_TMA there).
BWD_ROWS = {(256, 2): (4, 4, 3), (512, 2): (4, 8, 3), (512, 4): (4, 8, 3), (1024, 4): (2, 8, 3)}
BWD_ROWS |= {(128, 2): (16, 4, 3), (64, 2): (16, 4, 3)}
#: Warps of that kernel: every BWD_ROWS entry was measured at 4 (tiles of 1024-2048 values).
BWD_ROWS_WARPS = 4
#: Small M with the sum finish: at least this many rows per program, so the float64 partials
#: (programs x N x 8 bytes) stay below the data read. 256 x 4096 bf16: 128 programs 8.4 us, 64
#: 8.5; 1024 rows: 264 programs 14.7 us, 512 24.4.
MIN_ROWS_PER_PROGRAM = 2
#: Programs in the interpreter (no SMs there): small, so CPU tests still cover several partials
#: and an odd-sized dweight tree (a node without a sibling).
INTERPRETER_PROGRAMS = 5
#: Budget for the dweight partials (programs x N x 8 bytes): the tutorial's 64 MiB, independent of
#: M because the grid is persistent.
DW_SCRATCH_BYTES = 64 << 20
#: dweight finish: in the backward launch over a fixed tree (one launch: less host time, and no
#: launch gap) for rows up to TREE_ALWAYS_N wide past small M; otherwise a second launch sums
#: the partials (dweight_sum_kernel). The tree's last program climbs log_FANOUT(programs) levels
#: one after another (an atomic and an L2 round trip each), each level moving N partials per
#: child: with 2 children per node, at 1024 columns it took
#: 135.8 us vs 157.7 with the sum launch (65536 rows: 131.1 vs 150.6 best sum, 2026-11-30), but
#: at 4096 columns the sum launch wins at every M measured (graph replay, bf16): 256 rows 8.4 vs
#: 29.5 us, 1024 rows 14.7 vs 35.9, 2048 rows 26.8 vs 32.9 (the tree's tail is ~20 us there).
#: Problems up to F64_ROWS_MAX_ELEMS elements (latency-bound, a program often owns few rows)
#: accumulate their rows in float64: each term exact up to rstd's rounding; larger ones
#: accumulate rows in float32 (float64 costs ~1.5x the registers of the row loop: 126 vs 80 at
#: 4096 columns, 8 warps), and every finish adds partials in float64 (float32 partials are
#: stored as such for the sum launch, which widens them exactly: 32768 x 8192 bf16 backward 436.9
#: us vs 451.7 with float64 partials, now equal to the previous two-launch backward's 437.0).
TREE_ALWAYS_N = 1024
F64_ROWS_MAX_ELEMS = 1 << 22
#: Children per node of that tree: the tail is one atomic and one L2 round trip per level, so a
#: wider node (log_FANOUT(programs) levels, each adding FANOUT slots) shortens it. Graph replay,
#: backward alone, bf16, default grid (tune.py part tree, 2026-11-30): 65536 x 1024 8 children
#: 129.3 us, 4: 130.7, 16: 173.1, 2 (binary): 140.9, sum launch 155.8; 16384 x 1024 49.8 / 50.7
#: / 58.4 / 61.9 / 52.1; 262144 x 256 229.0 (8) vs 226.8 (2), within noise.
TREE_FANOUT = 8
#: Small M: up to SMALL_M rows of blocks up to SMALL_MAX_BLOCK columns take the sum finish (even
#: at N <= TREE_ALWAYS_N: the tree's tail is most of such a launch), at most SMALL_GROUPS
#: programs of at least SMALL_ROWS_PER_PROGRAM rows, pipelined (SMALL_STAGES) from
#: SMALL_PIPELINE_MIN_BLOCK columns. Graph replay, backward alone (tune.py part small,
#: 2026-11-30), against the heuristic before: 128 x 257 fp32 4.9 us (32 programs; 64: 4.6) vs
#: 12.9 (tree of 128 one-row programs; 9.1 at best with 4-8 children); 256 x 1024 5.6 vs 17.7;
#: 1024 x 1024 8.5 vs 38.2; 256 x 4096 8.2 vs 8.5; 1024 x 4096 13.2 vs 14.7; 2048 x 4096 22.8
#: vs 25.5. Pipelining at 512 columns: 4.7 vs 4.6 us, so not below 1024. 2048-column blocks and
#: float32 rows wider than 257 were not measured (between the measured ones).
SMALL_M = 2048
SMALL_MAX_BLOCK = 4096
SMALL_GROUPS = 128
SMALL_ROWS_PER_PROGRAM = 4
SMALL_STAGES = 3
SMALL_PIPELINE_MIN_BLOCK = 1024
#: Small M up to COLUMNS_MAX_ELEMS elements (on a GPU, not float64 math) finishes dweight in the
#: backward launch itself by column strips (rmsnorm_backward_columns_kernel): one launch instead
#: of two, no partials. Strips of COLUMNS_STRIP columns by tiles of COLUMNS_TILE values (rows per
#: step: COLUMNS_TILE // COLUMNS_STRIP, at most the rows' next power of two). Graph replay,
#: backward alone, H200, Triton 3.6 (tune.py part columns, 2026-12-02, twenty-first session;
#: experiments/kernel_perf/results/h200_2026-12-02f), strips of 16 x 256 rows against the sum
#: finish: 128 x 257 fp32 3.14 us (16 x 128 rows) vs 4.93; 256 x 1024 bf16 2.79 vs 5.63;
#: 256 x 4096 6.03 vs 8.16; 1024 x 1024 6.23 vs 8.65; host cost per backward call 34.5 us vs
#: 52.2 (128 x 257). Part colrule (h200_2026-12-02g), up to 2^21 elements: 512 x 4096 7.77 vs
#: 9.99, 1024 x 2048 7.26 vs 10.10, 2048 x 1024 10.94 vs 11.63, 512 x 2048 4.56 vs 7.97, 64 x
#: 4096 4.75 vs 7.25, 256 x 4096 fp16 5.93 vs 8.27 and fp32 6.78 vs 11.00, 2048 x 256 fp32
#: 10.47 vs 13.39; the one loss taken: 2048 x 512 bf16 10.19 vs 9.96. Not above 2^21: 1024 x 4096
#: 13.57 vs 13.38, 2048 x 4096 34.5 vs 22.3 (each strip walks all M rows: the launch's tail
#: grows with M). Strips of 32 and 64 columns measured no better (32 x 128 rows: 3.11 / 3.43 /
#: 6.02 / 10.21 us; 64: 4.2-26.5).
COLUMNS_MAX_ELEMS = 1 << 21
COLUMNS_STRIP = 16
COLUMNS_TILE = 4096


def columns_rows(m: int, strip: int = COLUMNS_STRIP, tile: int = COLUMNS_TILE) -> int:
    """Rows per step of a dweight strip ``strip`` columns wide over ``m`` rows: ``tile`` values
    per step, at most the rows' next power of two."""
    return min(tile // strip, triton.next_power_of_2(max(m, 1)))


#: Tensor-descriptor (TMA) backward (rmsnorm_backward_tma_kernel, Hopper and newer): (rows per
#: step, programs per SM, stages, warps), keyed like BWD_PIPELINE, from TMA_MIN_M rows. Graph
#: replay, backward alone, on the H200 (tune.py parts tmabwd and tmapkg, 2026-11-30, seventh
#: session; experiments/kernel_perf/results/h200_2026-11-30g). Chosen by part tmabwd's sweep:
#: 65536 x 1024 bf16 111.8 us vs 126.7 (four more variants at 114-117); 131072 x 512 bf16 115.8
#: vs 122.7; 16384 x 4096 float32 208.9 vs 216.0. Not at 16384 x 2048 bf16 (60.8 vs 62.2: within
#: noise) nor 16384 x 4096 bf16 (113.8 vs 113.1). Then part tmapkg against the heuristic without
#: it, 4096 / 8192 / 16384 / 32768 / 65536 / 131072 rows (Triton 3.6): 512 columns 13.9 / 16.7
#: / 23.6 / 38.7 / 64.6 / 116.5 us vs 28.4 / 30.6 / 37.7 / 49.2 / 73.4 / 121.8; 1024 columns
#: 14.2 / 22.3 / 36.5 / 63.8 / 112.7 / 211.4 vs 22.6 / 30.2 / 44.2 / 72.9 / 126.9 / 234.1;
#: float32 4096 columns (to 32768 rows) 57.7 / 109.6 / 208.5 / 413.0 vs 61.5 / 111.4 / 214.2 /
#: 412.2 (equal at 32768). Triton 3.9: the same within 1-8%. The sum finish, as measured.
#: Joined 2026-12-01 (tune.py parts tmasweep, then tmacand over M, experiments/kernel_perf/
#: results/h200_2026-12-01; kept only where TMA won at every M): float32 1024 columns, 4096 to
#: 131072 rows, 26.2 / 35.5 / 62.0 / 110.9 / 207.2 / 402.1 us vs 30.2 / 43.2 / 68.8 / 117.4 /
#: 222.1 / 418.8; bf16 4096 columns, 4096 to 32768 rows, 34.3 / 61.0 / 112.6 / 213.9 vs 36.7 /
#: 61.5 / 114.3 / 216.5; bf16 8192 columns, 4096 to 16384 rows, 59.6 / 110.7 / 211.1 vs 64.4 /
#: 116.7 / 224.0. Not float32 512 columns (0.74-0.97x below 131072 rows). Float32 2048 columns
#: (the bf16-mixed Llama's residual stream at hidden 2048) joined 2026-12-01 (twelfth session,
#: tune.py part tmasweep at 4096-65536 rows, experiments/kernel_perf/results/h200_2026-12-01d):
#: 35.6 / 60.4 / 117.2 / 218.2 / 417.6 us vs 40.1 / 68.5 / 125.7 / 236.9 / 461.8 (1.07-1.14x).
BWD_TMA = {
    (512, 2): (4, 2, 4, 4),
    (1024, 2): (2, 2, 4, 4),
    (4096, 4): (1, 1, 3, 8),
    (1024, 4): (1, 2, 4, 4),
    (2048, 4): (1, 2, 3, 4),
    (4096, 2): (1, 1, 4, 4),
    (8192, 2): (1, 1, 3, 8),
    (256, 2): (16, 1, 3, 4),
    (512, 4): (4, 2, 3, 4),
    (128, 2): (32, 2, 3, 4),
    (64, 2): (64, 2, 3, 4),
    (128, 4): (16, 2, 3, 4),
    (64, 4): (8, 6, 3, 4),
}
#: float32 128 and 64 columns (per-head q/k norms of a float32 model) joined 2026-12-05
#: (thirty-first session; tune.py part tmanew, experiments/kernel_perf/results/h200_2026-12-05:
#: 36 plans x both deals at each, dx within 1e-6 of the pointers'): 524288 x 128 419.5 us (the
#: pointer heuristic) against 197.5 (16 rows a tile, 2 per SM, grid-stride); 1048576 x 64 709.7
#: against 200.4 (8 rows, 6 per SM, grid-stride). From TMA_MIN_M by part tmajoin over M (figures
#: in experiments/kernel_perf/README.md).
#: 128 and 64 bf16 columns joined 2026-12-04 (twenty-eighth session; tune.py part tmanew,
#: experiments/kernel_perf/results/h200_2026-12-04c: 12 plans, both deals), grid-stride from
#: TMA_MIN_M: 128 columns at 16384 / 65536 / 524288 rows 19.5 / 58.5 / 383.6 us (the pointer
#: heuristic then) against 10.1 / 16.9 / 102.0 (32 rows a tile, 2 per SM; best plans 9.5 / 16.8
#: / 102.0); 64 columns, measured at 1048576 rows only: 717.8 against 100.4 (64 rows, 2 per SM).
#: Joined 2026-12-04 (twenty-seventh session; tune.py part tmanew, experiments/kernel_perf/
#: results/h200_2026-12-04b/tmanew2.json: 26 plans, blocks and grid-stride, dx identical to the
#: pointers'; the pointer figures from 16384 rows are the first sweep's, its JSON lost),
#: each against the heuristic's pointer kernel, backward alone with its sum finish, graph
#: replay. bf16 256 columns at 4096 / 8192 / 16384 / 65536 / 262144 rows: 16.7 / 17.6 / 19.6 /
#: 44.0 / 122.3 us against 7.8 / 9.9 (16 rows a tile, 1 program per SM, blocks) and 13.4 /
#: 32.6 / 103.0 (grid-stride, 2 per SM, BWD_TMA_STRIDED); float32 512 columns at 4096 / 8192 /
#: 16384 / 65536 / 131072 rows: 21.2 / 27.9 / 39.4 / 112.9 / 217.4 against 9.3 / 15.9 / 29.4 /
#: 99.7 / 201.4 (4 rows, grid-stride, 2 per SM; the blocks 9.4 / 16.5 / 30.2 / 109.3 / 213.3).
#: BWD_TMA widths whose programs take their row tiles grid-stride (BackwardConfig.strided: tiles
#: p, p + G, ... of G programs, so that they read x and dy side by side instead of G places far
#: apart): (fewest rows, programs per SM, stages), replacing the plan's two; the plan's rows per
#: step and warps stay. Graph replay, backward alone with its sum finish, H200, Triton 3.6
#: (tune.py part tmastride, twenty-sixth session, 2026-12-04; experiments/kernel_perf/results/
#: h200_2026-12-04), BWD_TMA's blocks (the first of two timings) against the chosen deal, at
#: M = 4096 / 16384 / 65536 / 131072 rows where M x N <= 64M:
#:   bf16 1024: 11.1 / 30.7 / 106.7 us against 10.9 / 30.3 / 100.4 (the deal at the plan's 2 per
#:   SM lost: 0.91-0.93x above 4096 rows); bf16 4096: 31.8 / 109.1 against 30.5 / 108.3; bf16
#:   8192 (4096 / 8192 rows): 58.1 / 109.9 against 53.9 / 100.0; float32 4096: 53.9 / 203.7
#:   against 51.8 / 191.1; float32 2048 (to 32768 rows): 29.6 / 110.1 / 208.2 against 29.4 /
#:   107.2 / 206.3;
#:   bf16 512 and float32 1024 from 16384 rows only: bf16 512 18.9 / 59.4 / 109.9 against 18.5 /
#:   56.8 / 104.6, float32 1024 55.7 / 200.6 against 52.3 / 189.3; at 4096 rows they lost (10.2
#:   against 12.3, 17.3 against 18.3: too few tiles for the larger grid).
#: Bits: dx the blocks' exactly (the same per-row math: dx_diff 0 at all 157 timings); dweight's
#: partials hold other rows, so its bits differ from the blocks' (within the same bound) and
#: repeat from run to run.
BWD_TMA_STRIDED = {
    (512, 2): (16384, 3, 3),
    (1024, 2): (4096, 3, 3),
    (4096, 4): (4096, 1, 4),
    (1024, 4): (16384, 3, 4),
    (2048, 4): (4096, 2, 3),
    (4096, 2): (4096, 2, 3),
    (8192, 2): (4096, 1, 4),
    (256, 2): (16384, 2, 3),
    (512, 4): (4096, 2, 3),
    (128, 2): (4096, 2, 3),
    (64, 2): (4096, 2, 3),
    (128, 4): (4096, 2, 3),
    (64, 4): (4096, 6, 3),
}
#: Fewest rows for the TMA backward: the smallest M it was measured at.
TMA_MIN_M = 4096


def tma_from(n: int, itemsize: int) -> int | None:
    """Fewest rows from which the heuristic takes the TMA backward for rows of ``n`` values of
    ``itemsize`` bytes (TMA_MIN_M), or None where BWD_TMA has no plan."""
    return TMA_MIN_M if (n, itemsize) in BWD_TMA else None


#: A descriptor's box holds at most this many values per dimension (cuTensorMapEncodeTiled), so a
#: row is viewed as (N / TMA_CHUNK, TMA_CHUNK) when wider.
TMA_CHUNK = 256
#: Fewest bytes in one tensor's tile (rows x N values) of a pipelined (stages > 1) TMA backward.
#: Smaller tiles fault with "misaligned address" on the H200 under Triton 3.6: 14 of 312 explicit
#: configs did, every one a 32- or 64-byte tile at 3 stages; none from 128 bytes, none at one
#: stage (experiments/h200/tma_hunt.py, 2026-12-01). The heuristic's TMA widths (512 columns and
#: up) never come near it; explicit configs under it are refused by name.
TMA_PIPELINED_MIN_BYTES = 128

#: Chunk of the wide-row backward reduction mean(u*x) (rmsnorm_row_dot_kernel) and its warps.
ROW_DOT_BLOCK = 8192
ROW_DOT_WARPS = 16
#: dweight_sum_kernel tile: BLOCK_G x BLOCK_N float64 partials per step. BLOCK_G alone fixes the
#: order of the additions (rows g, g + BLOCK_G, ... in one lane, then the lanes), so dweight's bits
#: do not depend on BLOCK_N; narrower column strips give more programs. The sum launch alone over
#: the heuristic's partials, graph replay, H200 (experiments/kernel_perf/pdl.py, twenty-third
#: session), BLOCK_N 32 against 128: 132 x 4096 partials 2.7 us against 4.7, 263 x 1024 3.7
#: against 7.1, 261 x 2048 3.7 against 7.1, 128 x 4096 2.5 against 4.4; BLOCK_N 64 4.5-7.0, and
#: BLOCK_G 16 or 64 at 32 / 64 columns 2.8-4.6. Narrower again, one H200 run (twenty-fourth
#: session): BLOCK_N 8 / 16 / 32 at 132 x 4096 partials 2.27 / 2.41 / 2.69 us, at 263 x 1024
#: 2.39 / 2.84 / 3.63; so the strips are 8 wide (512 programs at N = 4096).
SUM_BLOCK_G = 32
SUM_BLOCK_N = 8
#: The same launch in Triton's interpreter, which runs its programs one after another in Python:
#: its cost is per program, so 128-column strips there (16x fewer programs than 8; the same bits,
#: BLOCK_N changes no order). At 8 columns here, tests/kernel/test_fuzz.py took 161 s against 99
#: at 128, and a fresh clone's CPU suite had not finished after 2600 s (1373 s at 32 columns).
INTERPRETER_SUM_BLOCK_N = 128

_WARPS = (1, 2, 4, 8, 16, 32)


@dataclasses.dataclass(frozen=True)
class ForwardConfig:
    """One forward launch.

    ``rows > 0``: the several-rows kernel, ``rows`` rows of ``block >= N`` columns per program.
    ``rows == 0``: one row per program, whole in registers when ``block >= N`` (one pass), else
    walked in ``block``-column chunks (read twice). ``ctas``: CTAs per program (``num_ctas``; more
    than 1 makes each program a thread-block cluster on Hopper: Triton splits the program's
    tensors over the CTAs and meets their reductions in distributed shared memory).
    ``packed``: one pass over 16-bit rows kept 16-bit in registers (see PACKED_FORWARD).
    ``unmasked``: one pass over rows exactly ``block`` wide, without masks (UNMASKED_MAX_ROWS).
    ``evict_last``: load the rows with the ``evict_last`` cache policy (EVICT_LAST_ROW_BYTES); a
    hint only, it changes no value. ``pdl``: launch with programmatic dependent launch (Hopper
    and newer; an explicit option, the heuristic never takes it, see PDL); no value changes.
    ``stream``: rows walked in chunks (``rows == 0``, ``block < N``) read their second pass with
    the ``evict_first`` policy and store y streaming (``.cs``); hints only, no value changes.
    ``stages``: software pipelining of that second pass (``tl.range`` ``num_stages``; 1: none),
    the next chunks' loads in flight while one is scaled; no value changes. The heuristic takes
    neither: the variant of ``experiments/kernel_perf/wide_forward.py`` with the same hints took
    116.7 us against the package's 131.1 at 512 x 131072 bf16 on an H100 (``tune.py --parts
    widefwd``, 2026-12-05), hints alone 132.8 (that variant's launch at 3 stages pipelines
    nothing: ``experiments/kernel_perf/ptx_compare.py``); measured in the package on the H200,
    ``stream`` took 98.0 against 98.5 and ``stages`` 2 / 3 103.5 / 105.6
    (``experiments/h200/results_2026-12-05c/widefwd.log``): pass 2's async copies carry no
    ``evict_first``.
    ``split``: 0, or each row split over ``split`` programs of one cooperative launch
    (``kernels.rmsnorm_forward_split_kernel``; ``rows == 0``, ``block`` columns a program,
    ``split * block >= N``): x read from DRAM once where one program's registers cannot hold a
    row (SPLIT_FORWARD). Every program of the grid must be resident at once (``split`` <= the
    SMs); through the interpreter, which runs programs one after another, ``split`` 1 only.
    With ``split``, ``stages`` > 1 takes the staged kernel
    (``kernels.rmsnorm_forward_split_staged_kernel``: the chunk loads ``stages - 1`` steps ahead
    in shared memory, where the default keeps two in registers; the same bits); the heuristic
    does not take it: it lost to the default at every shape timed (see SPLIT_FORWARD).
    ``cluster``: 0, or each row split over the ``cluster`` CTAs (<= 8) of one hardware
    thread-block cluster (``kernels.rmsnorm_forward_cluster_kernel``; ``rows == 0``, ``block``
    columns a CTA, ``cluster * block >= N``): x read from DRAM once, with one cluster barrier a
    row and no persistent grid. Compiled kernels on Hopper or newer; through the interpreter,
    ``cluster`` 1 only (CLUSTER_FORWARD).
    ``maxnreg``: with ``cluster``, ptxas' register cap for the cluster kernel (0: the compiler's
    choice; MAXNREG_RANGE): fewer registers a thread, more CTAs an SM; the same instructions, so
    no value changes. The interpreter has no registers to cap: it ignores it.
    """

    block: int
    rows: int
    num_warps: int
    ctas: int = 1
    packed: bool = False
    unmasked: bool = False
    evict_last: bool = False
    pdl: bool = False
    stream: bool = False
    stages: int = 1
    split: int = 0
    cluster: int = 0
    maxnreg: int = 0

    def check(self, n: int) -> None:
        """Raise ``ContractValueError`` naming the field if this config cannot run rows of ``n``."""
        _check_block("ForwardConfig.block", self.block)
        _check_warps("ForwardConfig.num_warps", self.num_warps)
        _check_ctas("ForwardConfig.ctas", self.ctas)
        if self.maxnreg:
            lo, hi = MAXNREG_RANGE
            if isinstance(self.maxnreg, bool) or not isinstance(self.maxnreg, int):
                raise ContractValueError(
                    f"ForwardConfig.maxnreg must be an int (got {type(self.maxnreg).__name__})"
                )
            if not lo <= self.maxnreg <= hi:
                raise ContractValueError(
                    f"ForwardConfig.maxnreg must be 0 (the compiler's choice) or {lo} to {hi} "
                    f"registers a thread (got {self.maxnreg})"
                )
            if not self.cluster:
                raise ContractValueError(
                    "ForwardConfig.maxnreg caps the cluster kernel's registers: it needs "
                    f"cluster > 0 (got maxnreg={self.maxnreg}, cluster={self.cluster})"
                )
        if self.cluster:
            self._check_cluster(n)
            return
        if self.split:
            self._check_split(n)
            return
        if self.rows < 0:
            raise ContractValueError(f"ForwardConfig.rows must be >= 0 (got {self.rows})")
        if self.rows and self.block < n:
            raise ContractValueError(
                f"ForwardConfig.block must be >= N = {n} with rows > 0 (got {self.block})"
            )
        _check_clusters_supported("ForwardConfig.ctas", self.ctas)
        if self.packed and (self.rows or self.block < n):
            raise ContractValueError(
                "ForwardConfig.packed needs one whole row per program: rows == 0 and "
                f"block >= N = {n} (got rows={self.rows}, block={self.block})"
            )
        if self.stream and (self.rows or self.block >= n):
            raise ContractValueError(
                "ForwardConfig.stream hints the second pass of rows walked in chunks: rows == 0 "
                f"and block < N = {n} (got rows={self.rows}, block={self.block})"
            )
        if self.stages < 1:
            raise ContractValueError(f"ForwardConfig.stages must be >= 1 (got {self.stages})")
        if self.stages > 1 and (self.rows or self.block >= n):
            raise ContractValueError(
                "ForwardConfig.stages pipelines the second pass of rows walked in chunks: "
                f"rows == 0 and block < N = {n} (got rows={self.rows}, block={self.block})"
            )
        if self.unmasked and (self.rows or self.block != n):
            raise ContractValueError(
                "ForwardConfig.unmasked needs one row per program exactly block wide: rows == 0 "
                f"and block == N = {n} (got rows={self.rows}, block={self.block})"
            )

    def _others(self) -> dict[str, bool]:
        """The options the split-row and cluster kernels do not take, and whether each is set."""
        return {
            "ctas": self.ctas > 1,
            "packed": self.packed,
            "unmasked": self.unmasked,
            "evict_last": self.evict_last,
            "pdl": self.pdl,
            "stream": self.stream,
        }

    def _check_cluster(self, n: int) -> None:
        if not 0 < self.cluster <= MAX_CLUSTER:
            raise ContractValueError(
                f"ForwardConfig.cluster must be 0 (off) or 1 to {MAX_CLUSTER}, the CTAs of a "
                f"portable thread-block cluster (got {self.cluster})"
            )
        if self.rows != 0 or self.cluster * self.block < n:
            raise ContractValueError(
                "ForwardConfig.cluster splits one row over cluster CTAs of block columns: rows "
                f"== 0 and cluster * block >= N = {n} (got rows={self.rows}, "
                f"cluster={self.cluster}, block={self.block})"
            )
        taken = [name for name, on in self._others().items() if on]
        taken += ["split"] if self.split else []
        taken += ["stages"] if self.stages != 1 else []
        if taken:
            raise ContractValueError(
                f"ForwardConfig.cluster takes none of {', '.join(taken)} (the cluster kernel "
                "has its own schedule): leave them at their defaults"
            )

    def _check_split(self, n: int) -> None:
        if self.split < 0:
            raise ContractValueError(f"ForwardConfig.split must be >= 0 (got {self.split})")
        if self.rows != 0 or self.split * self.block < n:
            raise ContractValueError(
                "ForwardConfig.split splits one row over split programs of block columns: rows "
                f"== 0 and split * block >= N = {n} (got rows={self.rows}, split={self.split}, "
                f"block={self.block})"
            )
        if self.stages < 1:
            raise ContractValueError(f"ForwardConfig.stages must be >= 1 (got {self.stages})")
        taken = [name for name, on in self._others().items() if on]
        if taken:
            raise ContractValueError(
                f"ForwardConfig.split takes none of {', '.join(taken)} (the split-row kernel "
                "has its own schedule): leave them at their defaults"
            )


@dataclasses.dataclass(frozen=True)
class BackwardConfig:
    """One backward launch (plus the row reduction of wide rows and the dweight sum, if any).

    ``block`` columns per program (the whole row when ``one_tile``; else ``cdiv(N, block)``
    column tiles after a separate ``mean(u*x)`` launch); ``groups`` programs along the rows, each
    owning ``rows_per_program`` consecutive rows; ``tree``: finish dweight inside the launch over a
    fixed tree of ``fanout`` children per node (else a second, fixed-order sum launch);
    ``dw_float64``: accumulate each program's rows in float64; ``stages``: software pipelining
    of the row loop; ``rows``: rows per step of that loop (more than 1: a ``(rows, block)`` tile
    per step, one-tile rows only); ``ctas``: CTAs per program of the row kernels, as
    :class:`ForwardConfig`'s (more than 1 with the sum finish only: the tree's counters are
    scalar atomics, which every CTA of a cluster would run); ``tma``: move x, dy and dx through
    tensor descriptors (Hopper's TMA; rows of exactly ``block`` columns, ``rows_per_program`` a
    multiple of ``rows``, one CTA; the tensors must be 16-byte aligned, see ``ops``);
    ``dw_columns``: more than 0 finishes dweight in the same launch without partials
    (rmsnorm_backward_columns_kernel): besides the ``groups`` row programs, one program per strip
    of ``dw_columns`` columns sums it over all M rows, ``dw_rows`` rows per step (one tile per row
    only; not with the tree, clusters, TMA or several rows per step); ``pdl``: the dweight sum
    launch with programmatic dependent launch, started early by the row kernel (Hopper and
    newer, see PDL); no value changes; ``strided`` (TMA only): program ``p`` of ``groups`` takes
    the row tiles ``p, p + groups, ...`` instead of one block of ``rows_per_program`` rows, which
    is then the most rows one program takes (BWD_TMA_STRIDED); dweight's bits depend on it, and
    stay the same from run to run. ``cluster``: 0, or each program is a thread-block cluster of
    ``cluster`` CTAs made by the launch (``kernels.rmsnorm_backward_cluster_kernel``; Hopper and
    newer, any supported Triton; 1 through the interpreter), CTA ``k`` holding columns ``k *
    block ...`` of each row: ``cluster == cdiv(N, block)``, ``one_tile`` False, the sum finish,
    one row a step, no pipelining, TMA, dw_columns, strided or ``ctas``. Wide rows are then read
    once, where the column tiles read them twice (after the row-dot launch). ``prefetch``
    (``cluster`` only): each CTA loads its chunk of the next row's x and dy before the meeting
    (more registers; no value changes; not where dy comes in parts).
    """

    block: int
    one_tile: bool
    groups: int
    rows_per_program: int
    num_warps: int
    tree: bool
    dw_float64: bool
    stages: int = BWD_STAGES
    fanout: int = TREE_FANOUT
    rows: int = 1
    ctas: int = 1
    tma: bool = False
    dw_columns: int = 0
    dw_rows: int = 0
    pdl: bool = False
    strided: bool = False
    cluster: int = 0
    prefetch: bool = False

    def tiles_for(self, n: int) -> int:
        """Column tiles per row of ``n`` (1 when ``one_tile``)."""
        return 1 if self.one_tile else triton.cdiv(n, self.block)

    def check(self, m: int, n: int) -> None:
        """Raise ``ContractValueError`` naming the field if this config cannot run ``(m, n)``."""
        _check_block("BackwardConfig.block", self.block)
        _check_warps("BackwardConfig.num_warps", self.num_warps)
        if self.one_tile and self.block < n:
            raise ContractValueError(
                f"BackwardConfig.block must be >= N = {n} with one_tile (got {self.block})"
            )
        if self.groups < 1 or self.rows_per_program < 1:
            raise ContractValueError(
                "BackwardConfig.groups and rows_per_program must be >= 1 "
                f"(got {self.groups}, {self.rows_per_program})"
            )
        if self.cluster:
            self._check_cluster(n)
        elif self.prefetch:
            raise ContractValueError(
                "BackwardConfig.prefetch needs cluster > 0 (got prefetch=True, cluster=0)"
            )
        if self.strided:
            self._check_strided(m)
        elif m and not (self.groups - 1) * self.rows_per_program < m <= (
            self.groups * self.rows_per_program
        ):
            raise ContractValueError(
                "BackwardConfig must cover M rows with no empty program: "
                f"(groups - 1) * rows_per_program < M <= groups * rows_per_program "
                f"(got groups={self.groups}, rows_per_program={self.rows_per_program}, M={m})"
            )
        if self.fanout < 2:
            raise ContractValueError(f"BackwardConfig.fanout must be >= 2 (got {self.fanout})")
        if self.stages < 1:
            raise ContractValueError(f"BackwardConfig.stages must be >= 1 (got {self.stages})")
        _check_block("BackwardConfig.rows", self.rows)
        _check_ctas("BackwardConfig.ctas", self.ctas)
        if self.ctas > 1 and self.tree:
            raise ContractValueError(
                f"BackwardConfig.ctas > 1 needs the sum finish (got ctas={self.ctas}, tree=True)"
            )
        _check_clusters_supported("BackwardConfig.ctas", self.ctas)
        if self.rows > 1 and not self.one_tile:
            raise ContractValueError(
                f"BackwardConfig.rows > 1 needs one_tile (got rows={self.rows}, one_tile=False)"
            )
        if self.dw_columns:
            _check_block("BackwardConfig.dw_columns", self.dw_columns)
            _check_block("BackwardConfig.dw_rows", self.dw_rows)
            if not self.one_tile or self.tree or self.tma or self.ctas != 1 or self.rows != 1:
                raise ContractValueError(
                    "BackwardConfig.dw_columns needs one_tile, the row programs' one row per "
                    "step, no tree, no TMA and one CTA (got "
                    f"one_tile={self.one_tile}, rows={self.rows}, tree={self.tree}, "
                    f"tma={self.tma}, ctas={self.ctas})"
                )
        elif self.dw_rows:
            raise ContractValueError(
                f"BackwardConfig.dw_rows needs dw_columns > 0 (got dw_rows={self.dw_rows})"
            )
        if self.tma:
            if not self.one_tile or self.block != n or self.ctas != 1:
                raise ContractValueError(
                    "BackwardConfig.tma needs one_tile, block == N and ctas == 1 "
                    f"(got one_tile={self.one_tile}, block={self.block}, N={n}, ctas={self.ctas})"
                )
            if self.rows_per_program % self.rows or self.rows > TMA_CHUNK:
                raise ContractValueError(
                    "BackwardConfig.tma needs rows_per_program a multiple of rows, rows <= "
                    f"{TMA_CHUNK} (got rows_per_program={self.rows_per_program}, rows={self.rows})"
                )
            if n < 16 or n > TMA_CHUNK * TMA_CHUNK:
                raise ContractValueError(
                    f"BackwardConfig.tma needs 16 <= N <= {TMA_CHUNK * TMA_CHUNK} (got N={n})"
                )

    def _check_cluster(self, n: int) -> None:
        """The rules of ``cluster`` (see the class docstring)."""
        if isinstance(self.cluster, bool) or not 0 < self.cluster <= MAX_CLUSTER:
            raise ContractValueError(
                f"BackwardConfig.cluster must be 0 (off) or 1 to {MAX_CLUSTER}, the CTAs of a "
                f"portable thread-block cluster (got {self.cluster!r})"
            )
        if self.cluster != -(-n // self.block):
            raise ContractValueError(
                "BackwardConfig.cluster splits each row over cluster CTAs of block columns: "
                f"cluster == cdiv(N, block) (got cluster={self.cluster}, block={self.block}, "
                f"N={n})"
            )
        others = {
            "one_tile": self.one_tile,
            "tree": self.tree,
            "stages > 1": self.stages > 1,
            "rows > 1": self.rows > 1,
            "ctas > 1": self.ctas > 1,
            "tma": self.tma,
            "dw_columns": bool(self.dw_columns),
            "strided": self.strided,
        }
        taken = [name for name, on in others.items() if on]
        if taken:
            raise ContractValueError(
                f"BackwardConfig.cluster takes none of {', '.join(taken)} (the cluster kernel "
                "walks one row a step and finishes dweight with the sum launch)"
            )

    def _check_strided(self, m: int) -> None:
        """The rules of ``strided``: TMA only, and ``groups`` programs dealt row tiles round
        robin, each at least one, ``rows_per_program`` the most rows one of them takes."""
        if not self.tma:
            raise ContractValueError(
                f"BackwardConfig.strided needs tma (got strided=True, tma={self.tma})"
            )
        if not m:
            return
        tiles = -(-m // self.rows)
        most = -(-tiles // self.groups) * self.rows
        if self.groups > tiles or self.rows_per_program != most:
            raise ContractValueError(
                "BackwardConfig.strided needs groups <= cdiv(M, rows) (no program without a "
                "tile) and rows_per_program == cdiv(cdiv(M, rows), groups) * rows (got "
                f"groups={self.groups}, rows_per_program={self.rows_per_program}, "
                f"rows={self.rows}, M={m}: {tiles} tiles, rows_per_program {most})"
            )


def _check_block(name: str, block: int) -> None:
    if block < 1 or block & (block - 1):
        raise ContractValueError(f"{name} must be a power of two (got {block})")


#: CTAs per program a config may ask for: a thread-block cluster of up to 8 CTAs is portable on
#: Hopper (16 needs an opt-in attribute Triton does not set).
_CTAS = (1, 2, 4, 8)
#: Oldest Triton that splits these kernels over a cluster: a row's reduction across CTAs compiles
#: from 3.8 on (sm_90, experiments/kernel_perf/compile_check.py); 3.6 and 3.7 stop in their
#: PlanCTA pass ("parent layout must have at least rank >= 2") for every kernel here.
CLUSTERS_MIN_TRITON = (3, 8)
TRITON_VERSION = tuple(int(p) for p in triton.__version__.split("+")[0].split(".")[:2])
#: Wide rows split over a cluster where this Triton can (CLUSTERS_MIN_TRITON), keyed by row block
#: and only for rows exactly that wide. Graph replay, Triton 3.9 on the H200 (tune.py parts ctas
#: and ctaspkg, 2026-11-30, seventh session; experiments/kernel_perf/results/h200_2026-11-30g).
#: Forward (ctas, warps): 65536 columns, one pass over 8 CTAs of 8 warps, against the one-CTA
#: chunked pass: bf16 512 / 1024 / 4096 rows 45.6 / 87.5 / 337.1 us vs 47.4 / 91.9 / 358.4,
#: float32 85.5 / 164.1 / 634.4 vs 95.0 / 189.8 / 747.0. Not at 16384 / 32768 columns (clusters
#: 78.7+ vs 68.4, 88.0+ vs 74.4), 131072 (102.4 vs 104.8, within noise), 262144 (120.1 vs
#: 104.7), nor 40000 columns in a 65536 block (67.4 vs 51.1: the padding costs more).
FWD_CLUSTERS = {65536: (8, 8)}
#: Backward (ctas, warps, CTAs per SM), one tile per row, sum finish: 32768 columns over 2 CTAs
#: of 16 warps, 1 CTA per SM (SMs / 2 programs), against column tiles on one CTA: bf16 1024 /
#: 2048 / 8192 rows 81.4 / 146.0 / 520.6 us vs 91.5 / 175.6 / 655.0, float32 131.4 / 245.3 /
#: 910.7 vs 173.5 / 337.1 / 1291.8. Not at 16384 (161.6 vs 145.8), 65536 (215.8+ vs 171.1,
#: 793.4+ vs 641.4), nor 20000 columns in a 32768 block (131.2 vs 115.8).
BWD_CLUSTERS = {32768: (2, 16, 1)}
#: Wide rows whose backward splits each row over a launch-made cluster (BackwardConfig.cluster;
#: any supported Triton, Hopper and newer), keyed by (row block, bytes per value of x and dy):
#: (block a CTA, warps, CTAs an SM, prefetch). Only past F64_ROWS_MAX_ELEMS (float32 dweight
#: rows). x and dy are read once instead of twice (the row-dot launch, then the column tiles).
#: Backward alone, graph replay, H100, medians of 3 interleaved rounds
#: (experiments/kernel_perf/bwd_cluster_tune.py, 45th session; results/2026-12-06e_cluster_bwd):
#:   bf16 2048 x 32768 over 2 CTAs of 16384 columns at 32 warps (64 registers, one CTA an SM):
#:   173.3 us against 237.1 for the column tiles (16 warps: 177.2; 4 x 8192 or 8 x 4096: 203.7+);
#:   float32 1024 x 65536 over 8 CTAs of 8192 at 32 warps, the next row loaded early: 446.0
#:   against 463.9 (without prefetch 484.7).
#: Second run, the plans against the column tiles (bwd_cluster3.txt): bf16 32768 columns at
#: 1024 / 2048 / 8192 rows 91.4 / 172.9 / 617.7 us against 124.9 / 237.2 / 910.9; ragged 2048 x
#: 24576 141.0 against 179.6; fp16 2048 x 32768 223.1 against 236.6 (float16's widening from
#: its bits spills 6 registers); float32 2048 x 32768 over 2 x 16384 at 32 warps 372.1 against
#: 457.0 (24 registers spilled); float32 65536 at 1024 / 4096 rows 447.1 / 1746.0 against
#: 462.2 / 1810.7. Lost at 256 rows (bf16 256 x 32768: 33.3 against 32.6, four rows a cluster):
#: from BWD_CLUSTER_MIN_M rows only (512 not measured). On an H200 (one bench run, graph replay,
#: fwd + bwd, experiments/kernel_vs_peers/results/h200_2026-12-06e): bf16 2048 x 32768 208.1 us
#: against 242.5 with the column tiles (H200 bench of 2026-12-05; quack 253.6 there).
#: Not bf16 65536 (best 4 x 16384 at 32 warps: 999.4 us against 916.7 at 4096 rows, 267.6
#: against 241.5 at 1024) nor 131072 (8 x 16384: 281.1 against 250.0 at 512 rows): the column
#: tiles move 5/3 of the bytes at ~2.9 TB/s, while each row step of a cluster waits for its
#: slowest CTA with nothing else in flight on the SM (one CTA an SM), more so with 4 or 8 CTAs a
#: row than with 2 (8.1 us a step of 16384 columns a CTA over 4 CTAs, 5.4 over 2).
#: Nor float32 65536 any more (the 8 x 8192 plan above, next row loaded early): on the H200
#: (53rd session, results/h200_2026-12-07/bwd_cluster.txt) the column tiles took 329.8 us at
#: 1024 rows against the plan's 404.5; the tiles gain the H200's bandwidth (461.7 us on the
#: H100), the cluster's row steps do not (446.8 there: 3% ahead on the H100 only, twice in the
#: 54th session, results/h100_2026-12-07*). fp16 at 32768 stays: with float16 widened by the
#: conversion instruction (kernels.FP16_WIDEN_CVT) it runs 177.4 us against the tiles' 232.4 at
#: 2048 rows on the H100 (93.5 / 661.5 against 122.8 / 890.5 at 1024 / 8192); widened from its
#: bits it had lost to the tiles on the H200 (185.4 against 177.4).
BWD_CLUSTER_LAUNCH: dict[tuple[int, int], tuple[int, int, int, bool]] = {
    (32768, 2): (16384, 32, 1, False),
    (32768, 4): (16384, 32, 1, False),
}
BWD_CLUSTER_MIN_M = 1024


def clusters_here(device_index: int | None) -> bool:
    """Whether the heuristics may pick clusters: compiled kernels on a Hopper or newer GPU, with a
    Triton that splits them."""
    return (
        device_index is not None and TRITON_VERSION >= CLUSTERS_MIN_TRITON and hopper(device_index)
    )


def _check_ctas(name: str, ctas: int) -> None:
    if ctas not in _CTAS:
        raise ContractValueError(f"{name} must be one of {_CTAS} (got {ctas})")


def _check_clusters_supported(name: str, ctas: int) -> None:
    if ctas > 1 and TRITON_VERSION < CLUSTERS_MIN_TRITON:
        need = ".".join(map(str, CLUSTERS_MIN_TRITON))
        raise ContractValueError(
            f"{name} > 1 needs Triton >= {need}: this Triton ({triton.__version__}) cannot split a "
            "row's reduction over a thread-block cluster"
        )


def _check_warps(name: str, warps: int) -> None:
    if warps not in _WARPS:
        raise ContractValueError(f"{name} must be one of {_WARPS} (got {warps})")


@functools.cache
def sm_count(device_index: int) -> int:
    return torch.cuda.get_device_properties(device_index).multi_processor_count


#: Shared memory one program may take where the device does not say (Hopper's opt-in limit per
#: thread block, 227 KiB; also the interpreter's, so the CPU refuses what an H200 would).
HOPPER_SHARED_BYTES = 227 * 1024


@functools.cache
def shared_bytes(device_index: int | None) -> int:
    """The most shared memory one program of this device may take (bytes)."""
    if device_index is None:
        return HOPPER_SHARED_BYTES
    props = torch.cuda.get_device_properties(device_index)
    return int(getattr(props, "shared_memory_per_block_optin", HOPPER_SHARED_BYTES))


#: Shared memory a pipelined forward takes beside its ring of chunks: the reductions' scratch
#: (sm_90 builds of the staged split kernel: 32-64 bytes over the ring,
#: tests/kernel/test_split_staged_build.py; a ring that fills the device exactly would not
#: launch).
STAGES_SCRATCH_BYTES = 1024


def check_forward_stages(
    config: ForwardConfig, x_size: int, w_size: int, index, second: str = "the weight"
) -> None:
    """A pipelined loop (``ForwardConfig.stages``) keeps ``stages - 1`` chunks of x (or h) and of
    ``second`` in shared memory (Triton's pipeliner, seen in the cubins of 3.9: 65536 bytes for
    bf16 chunks of 16384 at 2 stages of the chunked walk); refuse, naming the field, what the
    device cannot hold, before Triton's launch would (``OutOfResources``). ``x_size`` /
    ``w_size``: the element sizes (0: no ``second``): the chunked walk's second pass pipelines
    the weight, the staged split kernel the residual."""
    need = (config.stages - 1) * config.block * (x_size + w_size) + STAGES_SCRATCH_BYTES
    limit = shared_bytes(index)
    if need > limit:
        raise ContractValueError(
            f"ForwardConfig.stages keeps stages - 1 chunks of x and {second} in shared memory, "
            f"which must fit this device's {limit} bytes (got stages={config.stages}, "
            f"block={config.block}: {need} bytes); lower stages or block"
        )


#: Programs of the split-row forward per SM: one, so that every program of its persistent grid
#: is resident (a program of <= 32 warps always fits an SM alone) and its grid is sized without
#: an occupancy query; the H100 sweep's best configs all ran one per SM (coop_forward.py mode 3,
#: 36th session: 512 x 131072 113.3 us with 8 programs a row, 2 per SM could not launch).
SPLIT_PROGRAMS_PER_SM = 1


#: Rows at least this wide (16-bit or float32 x; float64 not measured) split over programs of
#: one cooperative launch, SPLIT_FORWARD[x's element size] = (block, warps): x read from DRAM
#: once, where the chunked walk reads it twice. Graph replay, 3 interleaved rounds, against the
#: chunked walk in the same run (experiments/kernel_perf/split_tune.py, 37th session):
#:   H100, the landed kernel (results/h100_2026-12-05e/v3_*): bf16 512 x 131072 123.0 us vs
#:   140.5, 256 x 262144 124.3 vs 142.8, 128 x 524288 125.3 vs 147.8, 64 x 1048576 133.7 vs
#:   187.1, 8 x 262144 7.1 vs 22.6, 1024 x 150000 285.1 vs 322.0; fp16 512 x 131072 122.7 vs
#:   140.2; bf16 + residual 197.4 vs 226.4; float32 (8192, 16) 512 x 131072 231.3 vs 277.6,
#:   256 x 262144 233.0 vs 282.3.
#:   H200, the kernel one change before (its target read from a returned atomic; results/
#:   h200_2026-12-05f): bf16 104.0 vs 105.1, 103.4 vs 104.9, 104.9 vs 114.5, 111.7 vs 157.5,
#:   6.6 vs 22.4 at the same shapes; fp16 101.8 vs 103.4; + residual 159.0 vs 163.5; float32
#:   192.5 vs 205.7, 198.5 vs 205.3. The H200's chunked walk is much closer (why: not
#:   measured), and quack's cluster forward far ahead (68.2 us at 512 x 131072, bench of
#:   2026-12-05).
#: Not below 131072: bf16 1024 x 100000 lost on both (H200 172.1 vs 159.8, H100 205.4 vs 200.8);
#: at 65536 and narrower one program holds the row (bf16 packed 1024 x 65536 94.6 against 117.9
#: split on an H100, 2048 x 32768 94.7 against 115.3; float32 1024 x 65536 225.0 chunked against
#: 227.1). Narrower chunks lose (a step's wait is paid per chunk: bf16 8192 x 8 warps 147.1 at
#: 512 x 131072 on the H100), wider ones spill; 16 warps lose for bf16 (135.9).
#: The staged kernel (``ForwardConfig(split=..., stages > 1)``, 38th session: Triton's pipeliner
#: keeps ``stages - 1`` chunks of loads in flight in shared memory) is not taken: on an H100 (39th
#: session, split_tune.py --staged, results/h100_2026-12-05g) it lost at every shape, e.g. bf16
#: 512 x 131072 123.4 us at best (16 x 8192, 3 stages, 2 an SM) against 122.2, 64 x 1048576 149.7
#: against 133.0, float32 512 x 131072 248.0 against 229.4: loads in flight were not the limit.
SPLIT_MIN_N = 131072
SPLIT_FORWARD = {2: (16384, 8), 4: (8192, 16)}


def cooperative_here(device_index: int | None) -> bool:
    """Whether compiled kernels can launch cooperatively here (``launch_cooperative_grid``,
    an NVIDIA option of Triton's): an NVIDIA GPU, not the interpreter."""
    return BACKEND != "interpreter" and device_index is not None and torch.version.hip is None


#: The most programs a split-row launch may take per device, where the driver refused a
#: cooperative grid of one program per SM (a context that sees fewer SMs than the device has:
#: MPS with a lower active thread percentage, green contexts); absent: no refusal yet.
SPLIT_GRID_CAP: dict[int, int] = {}


def split_programs(device_index: int) -> int:
    """The most programs of a split-row forward resident at once on this GPU: one per SM, or
    fewer where a launch was refused (SPLIT_GRID_CAP)."""
    return min(
        SPLIT_PROGRAMS_PER_SM * sm_count(device_index), SPLIT_GRID_CAP.get(device_index, 1 << 30)
    )


def cap_split_grid(device_index: int, programs: int) -> None:
    """Record that ``device_index`` keeps at most ``programs`` split-row programs resident:
    later grids, explicit configs' checks and the heuristic (whose cache is cleared) take it."""
    SPLIT_GRID_CAP[device_index] = min(programs, SPLIT_GRID_CAP.get(device_index, programs))
    forward_config.cache_clear()


def split_grid(config: ForwardConfig, m: int, device_index: int | None) -> int:
    """Programs of a split-row forward launch over ``m`` rows: a multiple of ``config.split``
    (the programs of one row walk their tasks in lockstep), all resident at once, and no more
    than the ``m * split`` tasks (the interpreter: one row's programs)."""
    c = config.split
    if device_index is None:
        return c
    return max(c, min(m * c, split_programs(device_index)) // c * c)


def check_split_tasks(m: int, split: int, grid: int, ahead: int = 2) -> None:
    """The split kernels walk ``m * split`` tasks with int32 indices, up to ``ahead`` steps
    (``ahead * grid``) past the last: two for the register-pipelined kernel, ``stages - 1`` for
    the staged one. Refuse a launch where they would overflow (only an explicit config over
    about 2**31 / split rows can reach it; the heuristic splits rows of 131072 columns and more,
    whose tensors would need terabytes)."""
    if m * split + ahead * grid > 2**31 - 1:
        raise ContractValueError(
            f"ForwardConfig.split: M * split must stay below 2**31 - {ahead} * programs (got "
            f"M={m}, split={split}, {grid} programs); use fewer programs a row"
        )


def check_forward_split(config: ForwardConfig, device_index: int | None) -> None:
    """An explicit split config must be able to run here: all of a row's programs resident at
    once (``split`` <= the SMs; Triton's interpreter runs programs one after another: 1)."""
    if not cooperative_here(device_index):
        if device_index is not None and BACKEND != "interpreter":
            raise ContractValueError(
                "ForwardConfig.split needs a cooperative launch (launch_cooperative_grid), which "
                "Triton has for NVIDIA GPUs only"
            )
        if config.split > 1:
            raise ContractValueError(
                "ForwardConfig.split > 1 needs compiled kernels on a GPU: Triton's interpreter "
                f"runs programs one after another, so a row's programs cannot wait for each "
                f"other (got split={config.split}; 1 runs the kernel here)"
            )
        return
    sms = split_programs(device_index)
    if config.split > sms:
        raise ContractValueError(
            f"ForwardConfig.split must be <= {sms}, the programs this GPU keeps resident at once "
            f"(got {config.split})"
        )


#: The most CTAs a thread-block cluster takes without the non-portable size attribute.
MAX_CLUSTER = 8
#: Rows of at least this many bytes of x split over the CTAs of one hardware cluster where
#: CLUSTER_FORWARD has a plan: CLUSTER_FORWARD[(x's dtype, a residual added)] = (block, warps)
#: plans, the first with cluster = ceil(N / block) <= MAX_CLUSTER taken (wider rows take the
#: rules after it). Graph replay, 3 interleaved rounds, H200, Triton 3.6 (split_tune.py
#: --pkg-cluster, 41st session, experiments/h200/results_2026-12-06), against the heuristic of
#: the time (the split-row kernel from 131072 columns, else the chunked walk) in the same run:
#:   bf16 512 x 131072 8 x 16384 at 8 warps 83.6-84.0 us vs 108.3-108.9 (at 4 warps 85.1, 16
#:   95.9; 2 x 65536 at 32 87.2; quack 68.2 on the bench of 2026-12-05); 1024 x 100000 7 x 16384
#:   133.2 vs 151.3; wider rows 65536 at 32: 256 x 262144 90.3 vs 110.1, 128 x 524288 92.7 vs
#:   110.9, 1024 x 150000 (3 CTAs) 214.9 vs 252.0;
#:   fp16 512 x 131072 8 x 16384 at 8 88.1-88.6 vs 107.6-108.0; 256 x 262144 4 x 65536 at 32
#:   111.3 vs 109.4 with the bits (fp16's widening by bits is slow in wide chunks: see below);
#:   bf16 + residual 4 x 32768 at 32: 512 x 131072 150.3 vs 158.4, 256 x 262144 (8 CTAs) 151.7
#:   vs 159.4 (bf16 65536 x 32 warps spills with a residual: 264 bytes of stack on sm_90);
#:   float32 32768 at 32: 1024 x 65536 149.5 vs 167.6, 1024 x 100000 257.5 vs 314.5, 512 x
#:   131072 155.7 vs 204.0, 256 x 262144 156.5 vs 207.5; + residual 1024 x 65536 278.6 vs 313.8,
#:   512 x 131072 278.6 vs 300.1.
#: Not where one CTA holds the row: bf16 1024 x 65536 (128 KiB, the packed pass, an earlier
#: rule) 70.5 vs 70.6 at 1 x 65536 and 80.7 at 4 x 16384; the smallest row measured to win is
#: bf16 100000 (195 KiB). Not over 8 CTAs of these blocks (the split rule); not fp16 with a
#: residual (not measured).
#: Each plan is (block, warps, maxnreg), maxnreg 0 but where a register cap was measured to win:
#:   fp16 16384 at 8 warps under 64 registers (80 uncapped, 2 bytes spilled: 3 -> 4 CTAs an SM):
#:   512 x 131072 100.4 / 100.5 us against 105.2 / 105.6 uncapped, on an H100 twice (43rd and
#:   44th sessions, split_tune.py --dsmem --maxnreg; results/h100_2026-12-06c and -06d), and
#:   in the package 101.0 against 105.3 (--pkg-cluster, -06d); caps 48 and 56 spill more and
#:   lose (117.8, 112.3). bf16's same plan gains 1.2% under 64 (72 uncapped): left uncapped.
#:   Not yet timed on an H200 (the same 64K registers an SM).
#: fp16 65536 at 32 warps: the uncapped cluster kernel widens fp16 by cvt.f32.f16
#:   (kernels.common._widen_exact); on an H100 (57th session, widen_few_rows.sh PARTS=cluster, 3
#:   rounds) 256 x 262144 113.8 us against 123.0 for the split-row kernel the rules gave, and
#:   132.2 with the bits (why it lost on the H200 in the 41st session: 111.3 vs 109.4, bits).
#:   Not yet timed on an H200 with the conversion.
CLUSTER_MIN_ROW_BYTES = 192 * 1024
CLUSTER_FORWARD: dict[tuple[torch.dtype, bool], tuple[tuple[int, int, int], ...]] = {
    (torch.bfloat16, False): ((16384, 8, 0), (65536, 32, 0)),
    (torch.float16, False): ((16384, 8, 64), (65536, 32, 0)),
    (torch.bfloat16, True): ((32768, 32, 0),),
    (torch.float32, False): ((32768, 32, 0),),
    (torch.float32, True): ((32768, 32, 0),),
}
#: ``ForwardConfig.maxnreg``'s range, inclusive: ptxas' ``--maxrregcount`` takes no fewer than 16
#: a thread; 255 is sm_90's most.
MAXNREG_RANGE = (16, 255)


def cluster_plan(
    n: int, dtype: torch.dtype | None, residual: bool
) -> tuple[int, int, int, int] | None:
    """``(block, warps, cluster, maxnreg)`` of CLUSTER_FORWARD's first plan that covers a row of
    ``n`` values of ``dtype`` in at most MAX_CLUSTER CTAs, or None (no plan, or too narrow a
    row)."""
    if dtype is None or n * dtype.itemsize < CLUSTER_MIN_ROW_BYTES:
        return None
    for block, warps, maxnreg in CLUSTER_FORWARD.get((dtype, residual), ()):
        cluster = -(-n // block)
        if cluster <= MAX_CLUSTER:
            return block, warps, cluster, maxnreg
    return None


def cluster_launch_here(device_index: int | None) -> bool:
    """Whether compiled kernels can launch thread-block clusters here: an NVIDIA Hopper or newer
    GPU, not the interpreter (any Triton of the supported range: the launch makes them)."""
    return BACKEND != "interpreter" and device_index is not None and hopper(device_index)


def check_forward_cluster(config: ForwardConfig, device_index: int | None) -> None:
    """An explicit cluster config must be able to run here: clusters of more than one CTA need
    compiled kernels on a Hopper or newer NVIDIA GPU (the interpreter runs programs one after
    another: 1)."""
    _check_cluster_here("ForwardConfig.cluster", config.cluster, device_index)


def check_backward_cluster(config: BackwardConfig, device_index: int | None) -> None:
    """:func:`check_forward_cluster`'s rule for ``BackwardConfig.cluster``."""
    _check_cluster_here("BackwardConfig.cluster", config.cluster, device_index)


def _check_cluster_here(name: str, cluster: int, device_index: int | None) -> None:
    if cluster <= 1:
        return
    if device_index is None or BACKEND == "interpreter":
        raise ContractValueError(
            f"{name} > 1 needs compiled kernels on a GPU: Triton's interpreter runs programs "
            f"one after another, so a row's CTAs cannot meet (got cluster={cluster}; 1 runs "
            "the kernel here)"
        )
    if not hopper(device_index):
        raise ContractValueError(
            f"{name} > 1 needs thread-block clusters: an NVIDIA GPU of compute capability 9.0 "
            f"or newer (got cluster={cluster})"
        )


@functools.cache
def hopper(device_index: int) -> bool:
    """Whether the GPU is an NVIDIA Hopper or newer (compute capability 9+): tensor-descriptor
    tiles copied in hardware (TMA), thread-block clusters with distributed shared memory. Not on
    ROCm, whose MI200/MI300 also report a major version of 9."""
    if torch.version.hip is not None:
        return False
    return torch.cuda.get_device_capability(device_index)[0] >= 9


#: Programmatic dependent launch (PDL) for the backward's dweight sum launch where the GPU has it
#: (Hopper and newer: ``griddepcontrol`` is sm_90+): the sum launch may start while the row kernel
#: before it drains (the row kernel lets it, ``kernels.common._pdl_prologue``), and waits at its
#: start until that kernel has finished and its writes are visible. Graph replay, H200, backward
#: alone (experiments/kernel_perf/pdl.py, twenty-third session; the row kernel launched with PDL
#: too): 16384 x 4096 bf16 110.3-110.9 us against 111.7-111.9, 65536 x 1024 111.3-112.1 against
#: 112.3-113.2, 8192 x 4096 60.3-60.4 against 61.3-61.5, 16384 x 2048 60.9 against 62.4-62.6,
#: 4096 x 4096 33.8 against 34.6-34.7, the same bits. Not for the row kernels after the forward:
#: launched with PDL after a forward (also with PDL) forward + backward took 212 us against 178 at
#: 65536 x 1024, 128 against 96 at 16384 x 2048, 182 against 178 at 16384 x 4096 (a persistent
#: grid that starts while the forward's last CTAs run is placed unevenly over the SMs), so the
#: row kernels and the forward launch without it (``ForwardConfig.pdl`` stays an explicit option).
PDL = True


def _pdl_supported(device_index: int | None) -> bool:
    """Compiled kernels on a Hopper or newer GPU: where a launch can take PDL."""
    return BACKEND != "interpreter" and device_index is not None and hopper(device_index)


def pdl_here(device_index: int | None) -> bool:
    """Whether the backward heuristic takes PDL (see PDL)."""
    return PDL and _pdl_supported(device_index)


def check_pdl(name: str, pdl: bool, device_index: int | None) -> None:
    """An explicit config's ``pdl`` must run here: compiled kernels on Hopper or newer."""
    if pdl and not _pdl_supported(device_index):
        where = "Triton's interpreter" if device_index is None else "this GPU (before Hopper)"
        raise ContractValueError(
            f"{name} needs compiled kernels on an NVIDIA Hopper or newer GPU (programmatic "
            f"dependent launch, sm_90+); got {where}"
        )


def _row_warps(block: int) -> int:
    """Warps of the one-row forward kernel: 4 warps at 2048 columns (70.5 us vs 74.2 with 8;
    graph replay 34.4 vs 36.3 at 16384 rows) and 8192 (67.3 us with 4 or 8), 8 at 4096 (graph
    replay, tune.py part fwdmid, 2026-11-30: 16384 rows 66.9 us vs 68.0 with 4, 75.8 with 16;
    4096 rows 18.4 vs 19.0 / 21.3) and 16384 (72.8 vs 74.6 with 16, 79.5 with 4), 32 at 32768
    (77.9 vs 78.4 with 16)."""
    if block >= 32768:
        return 32
    if block >= 16384 or block == 4096:
        return 8
    return 4


@functools.lru_cache(maxsize=1024)
def forward_config(
    m: int,
    n: int,
    device_index: int | None,
    float64: bool = False,
    packable: torch.dtype | None = None,
    row_bytes: int = 0,
    itemsize: int = 2,
    residual: bool = False,
    dtype: torch.dtype | None = None,
) -> ForwardConfig:
    """The forward heuristic: rows of ``n`` values, ``m`` of them, on CUDA device
    ``device_index`` (None: the interpreter); ``float64``: float64 math (never clustered: not
    measured); ``packable``: the rows' dtype where the packed pass could take them (16-bit rows
    and no residual; see PACKED_FORWARD), else None; ``row_bytes``: the bytes of one row of x
    where the evict_last hint could take it (no residual; see EVICT_LAST_ROW_BYTES), else 0;
    ``itemsize``: bytes of one value of x (ROWS_SHORT_TILE_BYTES); ``residual``: a residual is
    added, ``dtype``: x's dtype (CLUSTER_FORWARD's key; None: no cluster plan)."""
    config = _forward_geometry(m, n, device_index, float64, packable, itemsize, residual, dtype)
    lo, hi = EVICT_LAST_ROW_BYTES
    one_cta_row = config.rows == 0 and config.ctas == 1 and not (config.split or config.cluster)
    if lo <= row_bytes <= hi and one_cta_row:
        few = FEW_ROWS_FORWARD.get((config.block, itemsize))
        if few and not config.packed and m <= few[0]:
            return dataclasses.replace(config, num_warps=few[1])  # no hint: FEW_ROWS_FORWARD
        warps = max(config.num_warps, EVICT_LAST_MIN_WARPS.get(config.block, 1))
        config = dataclasses.replace(config, evict_last=True, num_warps=warps)
    return config


def _forward_geometry(
    m: int,
    n: int,
    device_index: int | None,
    float64: bool,
    packable: torch.dtype | None,
    itemsize: int,
    residual: bool = False,
    dtype: torch.dtype | None = None,
) -> ForwardConfig:
    """:func:`forward_config` before the evict_last rule."""
    if n <= ROWS_MAX_N:
        block = triton.next_power_of_2(n)
        if block in ROWS_SHORT_BLOCKS:
            rows = max(1, min(ROWS_SHORT, ROWS_SHORT_TILE_BYTES // (block * itemsize)))
            warps = ROWS_SHORT_WARPS
        else:
            rows = max(1, ROWS_TILE_BY_BLOCK.get(block, ROWS_TILE) // block)
            warps = 8 if block <= 256 else 4
        if device_index is not None:
            programs = ROWS_MIN_PROGRAMS_PER_SM * sm_count(device_index)
            while rows > 1 and -(-m // rows) < programs:
                rows //= 2
                warps = 4
            if rows == 1 and block in ONE_ROW_SHORT_WARPS:
                return ForwardConfig(block, 0, ONE_ROW_SHORT_WARPS[block])
        return ForwardConfig(block, rows, warps)
    block = triton.next_power_of_2(n)
    if n == block and block in PACKED_FORWARD.get(packable, ()):
        warps, unmasked_pass = PACKED_FORWARD[packable][block]
        return ForwardConfig(block, 0, warps, packed=True, unmasked=unmasked_pass)
    if n <= MAX_FUSED_N:
        return ForwardConfig(block, 0, _row_warps(block), unmasked=unmasked(m, n, block))
    # before FWD_CLUSTERS: float32 1024 x 65536 149.5 us over a launch-made cluster (41st
    # session) against 164.1 over Triton's (seventh session; both H200, not in one run)
    plan = cluster_plan(n, dtype, residual)
    if plan is not None and not float64 and cluster_launch_here(device_index):
        block, warps, cluster, maxnreg = plan
        return ForwardConfig(block, 0, warps, cluster=cluster, maxnreg=maxnreg)
    if n == block and block in FWD_CLUSTERS and not float64 and clusters_here(device_index):
        ctas, warps = FWD_CLUSTERS[block]
        return ForwardConfig(block, 0, warps, ctas)
    if n >= SPLIT_MIN_N and not float64 and itemsize in SPLIT_FORWARD:
        block, warps = SPLIT_FORWARD[itemsize]
        split = -(-n // block)
        if cooperative_here(device_index) and split <= split_programs(device_index):
            return ForwardConfig(block, 0, warps, split=split)
    return ForwardConfig(LOOP_BLOCK, 0, LOOP_WARPS)


#: Rows of x this many bytes wide, inclusive (one row per program, one CTA, no residual), load
#: their row with the ``evict_last`` policy (Inductor's generated reductions mark theirs so), and
#: one-pass blocks in EVICT_LAST_MIN_WARPS take at least those warps with it. Graph replay, H200,
#: Triton 3.6 (tune.py parts hintslast and evict, sixteenth session, 2026-12-02), the hint
#: against none at the heuristic's config:
#:   16 KiB rows: bf16 8192 columns, with 8 warps against 4 unhinted: 32768 / 8192 / 1024 rows
#:   251.0 / 65.2 / 6.68 us against 260.3 / 65.8 / 7.21 (compile 249.6 / 64.9; the hint at 4
#:   warps: 257.1 / 67.8 / 6.95); float32 4096 columns, 8 warps: 16384 rows 127.6 against 130.8
#:   (compile 126.8);
#:   32 KiB: bf16 16384 columns, 8192 rows 129.5 against 130.5 (16 warps 128.8: one shape, not
#:   taken); 64 KiB: bf16 32768 packed, 4096 rows 132.0 against 133.5; 128 KiB: bf16 65536
#:   packed, 4096 rows 256.5 against 263.8; 256 KiB: float32 65536 chunked, 4096 rows 666.1
#:   against 734.2.
#: Not below 16 KiB, where it loses or ties: bf16 4096 columns 4096 / 8192 / 16384 rows 17.97 /
#: 33.86 / 64.81 against 17.52 / 33.41 / 65.44; 2048 columns 34.11 against 33.32 (16384 rows);
#: the several-rows kernel's 1024 and 256 columns within 0.7% worse. Not above 256 KiB: bf16
#: 262144 columns at 256 rows 101.8 against 100.7. Float32 rows of 8192-32768 columns lie between
#: measured row sizes (not measured themselves); with a residual, clusters: not measured.
#: H100, forty-ninth session (tune.py part fwdhint, two runs, results/h100_2026-12-06i_fwdhint*):
#: with x rotated over 256 MiB (a cold x each call) the hint wins or ties at every shape, bf16
#: 1024x8192 to 8192x16384 and 4096x65536, float32 16384x4096: 0.5-1.8% under no hint at the same
#: warps; no hint at twice the warps within 0.2% of it or slower (8192x16384: 0.9% slower).
#: Replaying one x, no hint at 8192x8192 bf16 times 88.6 us against 90.8 (Liger 88.4-91.2):
#: an L2 reuse of the replayed x that the cold x does not show (91.4 unhinted, 90.8 hinted).
EVICT_LAST_ROW_BYTES = (16384, 262144)
EVICT_LAST_MIN_WARPS = {8192: 8}
#: Few rows of a one-pass block, (block, bytes per value of x): (most rows, warps): instead of
#: the evict_last hint at the block's warps, these warps unhinted. With ~15 rows an SM or fewer,
#: each SM holds few rows at once and a row's latency (its load, its reduction) is the time;
#: more warps a row shorten it. bf16 16384 columns, graph replay, tune.py part fwdhint with
#: FWD_HINT_WARPS (results/h100_2026-12-07*, H100, two runs), x rotated over 256 MiB / one x
#: replayed, us, 32 warps unhinted against the heuristic's 8 hinted:
#:   256 rows 6.44 / 5.03 against 6.72 / 4.99; 512 rows 11.16-11.33 / 8.52-8.59 against
#:   11.95-12.26 / 8.88-8.97; 1024 rows 25.08-25.16 / 25.09 against 25.30-25.39 / 25.27-25.38;
#:   2048 rows 47.20-47.44 / 47.24-47.45 against 47.43-47.65 / 47.38-47.64 (16 warps between).
#: H200 (53rd session, tune.py part fwdwarps, one x replayed): 16-32 warps unhinted 3-8% ahead
#: at 512-2048 rows (1024 rows 18.2 against 19.8); with x rotated not yet measured there.
#: Not at 8192 columns (512 / 1024 rows rotated: 7.03 / 12.31 against 6.13 / 10.92), nor from
#: 4096 rows (the H200's fwdwarps: the heuristic within 0.5% of every variant).
FEW_ROWS_FORWARD = {(16384, 2): (2048, 32)}

#: 16-bit rows exactly this wide (dtype: {block: (warps, unmasked)}) take the packed one pass: the
#: row read from DRAM once and kept 16-bit in registers (54 registers per thread for bf16 at
#: 65536 columns and 32 warps, no spills; the float32 one pass spills 136 bytes, compile_check.py
#: on sm_90), instead of the chunked pass that reads it twice. Graph replay, H200, Triton 3.6
#: (tune.py parts fwdpkg and fwdpkg16, fifteenth session, 2026-12-01):
#:   bf16, 65536 columns, 32 warps, unmasked: 262.2 / 71.1 / 39.9 us at 4096 / 1024 / 512 rows
#:   against 359.3 / 93.4 / 46.2 chunked (masked and packed: 309.3 / 86.6 / 45.3; quack 258.3 at
#:   4096 in the last bench with it);
#:   bf16, 32768 columns, 16 warps, masked: 133.3 / 69.0 / 37.5 us at 4096 / 2048 / 1024 rows
#:   against 145.3 / 74.5 / 39.4 one pass at 32 warps (unmasked at 16 warps: 144.0 / 74.0 / 39.2;
#:   32 warps masked 142.6 / 73.0 / 38.7; 32 warps unmasked not measured; compile 128.7 / 67.6 /
#:   37.0 leads there);
#:   fp16, 65536 columns, 32 warps, unmasked: 313.0 / 86.1 us at 4096 / 1024 rows against 360.0 /
#:   91.5 chunked (masked: 365.3 / 98.6); fp16, 32768 columns, 32 warps, unmasked: 67.5 us at 2048
#:   rows against 70.4 unpacked (16 warps: 93.7 unmasked, 106.5 masked: float16's widening takes
#:   more registers).
#: Not at 16384 and narrower (within 1-3% either way), nor float32, nor with a residual (x, the
#: residual and their sum live at once: 184 bytes spilled at 65536 columns; 1024 x 65536 149.6 us
#: chunked).
PACKED_FORWARD = {
    torch.bfloat16: {32768: (16, False), 65536: (32, True)},
    torch.float16: {32768: (32, True), 65536: (32, True)},
}
#: The packed pass stores rstd even where nothing will differentiate (``keep_rstd=False``, which
#: elsewhere drops the store): without that store, ptxas (Triton 3.6, sm_90) gives the packed pass
#: more registers, bf16 32768 columns at 16 warps 74 against 64 (one CTA per SM instead of two),
#: fp16 32768 at 32 warps 40 against 32 (the same halving), and fp16 65536 spills 40 bytes
#: against 24 (``experiments/kernel_perf/compile_check.py --store-rstd``). The bench's 2048 x
#: 32768 bf16 forward (no grad) took 90.7 us without the store against 68.8 with it (H200, graph
#: replay, 2026-12-02). No other forward config of that check changes its CTAs per SM.
PACKED_STORES_RSTD = True


def stores_rstd(config: ForwardConfig, keep_rstd: bool) -> bool:
    """Whether a forward launch of ``config`` stores rstd (a buffer is then allocated for it):
    always with ``keep_rstd``, and for packed rows (PACKED_STORES_RSTD)."""
    return keep_rstd or (config.packed and PACKED_STORES_RSTD)


#: Rows exactly one block wide, up to this many, load and store without masks: the one-row
#: kernel is latency-bound there. Graph replay, H200, bf16 (tune.py part fwdpkg, fifteenth
#: session, 2026-12-01), unmasked against masked: 4096 columns at 1024 / 2048 / 4096 rows 4.43 /
#: 6.65 / 17.35 us against 4.59 / 7.08 / 17.54, 2048 columns at 2048 / 4096 rows 4.29 / 6.71
#: against 4.40 / 6.88, 16384 columns at 1024 / 4096 rows 18.21 / 65.01 against 18.54 / 66.54;
#: losses at 256 x 4096 (2.32 against 2.28) and 1024 x 8192 (7.26 against 7.09); above 4096
#: rows within 0.7% either way (8192 x 4096 33.08 against 33.14, 8192 x 8192 65.63 against 65.44).
UNMASKED_MAX_ROWS = 4096


def unmasked(m: int, n: int, block: int) -> bool:
    """Whether a one-pass forward of ``m`` rows of ``n`` columns in a ``block`` drops its masks."""
    return n == block and m <= UNMASKED_MAX_ROWS


def _bwd_warps(block: int) -> int:
    """Warps of the one-tile backward: about 32 values per thread per live vector keeps the row
    loop near 100 registers without spills (compile_check.py, sm_90, float32 accumulation: 4096
    columns 148 registers at 4 warps, 80 at 8; 8192: 173 at 8, 107 at 16; 16384: 8 warps spill
    72 bytes, 16 warps 64 bytes at 128 registers)."""
    return max(4, min(16, block // 512))


def programs_per_sm(block: int) -> int:
    """Backward programs per SM for a row block (``PROGRAMS_PER_SM``; wider: 1, narrower: 8)."""
    return PROGRAMS_PER_SM.get(block, 8 if block < 1024 else 1)


@functools.lru_cache(maxsize=1024)
def backward_config(
    m: int,
    n: int,
    device_index: int | None,
    float64: bool = False,
    per_sm: int | None = None,
    itemsize: int = 2,
    tma: bool = False,
) -> BackwardConfig:
    """The backward heuristic for ``m`` rows of ``n`` (``float64``: float64 math; ``itemsize``:
    bytes per value of x and dy; ``tma``: the tensors can go through descriptors on a GPU with
    TMA). ``per_sm`` overrides :func:`programs_per_sm` (for tuning: the grid's size, everything
    else as chosen)."""
    config = _backward_geometry(m, n, device_index, float64, per_sm, itemsize, tma)
    return dataclasses.replace(config, pdl=True) if pdl_here(device_index) else config


def _backward_geometry(
    m: int,
    n: int,
    device_index: int | None,
    float64: bool,
    per_sm: int | None,
    itemsize: int,
    tma: bool,
) -> BackwardConfig:
    """:func:`backward_config` before the PDL rule."""
    first = tma_from(n, itemsize)
    tma_plan = None
    if tma and not float64 and first is not None and m >= first:
        tma_plan = BWD_TMA[(n, itemsize)]
    if tma_plan is not None and device_index is not None:
        stride = BWD_TMA_STRIDED.get((n, itemsize))
        if stride is not None and m >= stride[0]:
            rows, _, _, warps = tma_plan
            plan = (rows, stride[1], stride[2], warps)
            return _tma_backward_config(m, n, device_index, plan, per_sm, strided=True)
        return _tma_backward_config(m, n, device_index, tma_plan, per_sm)
    if n in BWD_CLUSTERS and not float64 and clusters_here(device_index):
        return _cluster_backward_config(m, n, device_index, per_sm)
    # (after Triton's clusters, measured on the H200 where that Triton splits them; the two
    # were not timed against each other)
    launch_plan = BWD_CLUSTER_LAUNCH.get((triton.next_power_of_2(n), itemsize))
    if (
        launch_plan is not None
        and not float64
        and m >= BWD_CLUSTER_MIN_M
        and m * n > F64_ROWS_MAX_ELEMS
        and cluster_launch_here(device_index)
    ):
        return _launch_cluster_backward_config(m, n, device_index, launch_plan, per_sm)
    one_tile = n <= MAX_FUSED_N_BWD
    block = triton.next_power_of_2(n) if one_tile else BWD_TILE
    tiles = 1 if one_tile else triton.cdiv(n, block)
    small = one_tile and block <= SMALL_MAX_BLOCK and m <= SMALL_M
    tree = n <= TREE_ALWAYS_N and not small
    tile_rows = None if small or float64 else BWD_ROWS.get((block, itemsize))
    if device_index is None:
        groups = INTERPRETER_PROGRAMS  # per column tile, so CPU tests cover tiles x a tree
    elif small and per_sm is None:
        groups = SMALL_GROUPS
    else:
        if per_sm is None:
            per_sm = tile_rows[1] if tile_rows else programs_per_sm(block)
        groups = max(1, sm_count(device_index) * per_sm // tiles)
    budget = max(1, DW_SCRATCH_BYTES // (n * 8))  # float64 partials
    min_rows = SMALL_ROWS_PER_PROGRAM if small else MIN_ROWS_PER_PROGRAM
    rows_cap = m if tree else max(1, m // min_rows)
    groups = max(1, min(rows_cap, groups, budget))
    rows_per_program = triton.cdiv(m, groups)
    groups = triton.cdiv(m, rows_per_program)  # no program without rows
    dw_float64 = tree or float64 or m * n <= F64_ROWS_MAX_ELEMS
    warps = _bwd_warps(block) if one_tile else BWD_TILE_WARPS
    if one_tile and not dw_float64:
        warps = BWD_WARPS.get(block, warps)
    stages, rows = BWD_STAGES, 1
    # Not for float64 rows: 3 stages of two 4096-wide float64 rows would ask for ~192 KiB of
    # shared memory (over the H200's 227 KiB with the kernel's own).
    if small and not float64 and block >= SMALL_PIPELINE_MIN_BLOCK:
        stages = SMALL_STAGES
    elif tile_rows:
        rows, _, stages = tile_rows
        warps = BWD_ROWS_WARPS
    elif one_tile and not float64 and rows_per_program >= BWD_PIPELINE_MIN_ROWS:
        stages = BWD_PIPELINE.get((block, itemsize), BWD_STAGES)
    dw_columns = dw_rows = 0
    if small and device_index is not None and not float64 and m * n <= COLUMNS_MAX_ELEMS:
        dw_columns, dw_rows = COLUMNS_STRIP, columns_rows(m)
    return BackwardConfig(
        block,
        one_tile,
        groups,
        rows_per_program,
        warps,
        tree,
        dw_float64,
        stages,
        rows=rows,
        dw_columns=dw_columns,
        dw_rows=dw_rows,
    )


def _tma_backward_config(
    m: int,
    n: int,
    device_index: int,
    plan: tuple[int, int, int, int],
    per_sm: int | None,
    strided: bool = False,
) -> BackwardConfig:
    """The BWD_TMA entry ``plan`` for ``m`` rows of ``n``: a persistent grid whose programs own
    whole tiles (one block of them each, or ``strided``: dealt round robin), with the sum
    finish."""
    rows, plan_per_sm, stages, warps = plan
    groups = sm_count(device_index) * (plan_per_sm if per_sm is None else per_sm)
    groups = max(1, min(groups, DW_SCRATCH_BYTES // (n * 8)))
    if strided:
        tiles = triton.cdiv(m, rows)
        groups = min(groups, tiles)  # no program without a tile
        rows_per_program = triton.cdiv(tiles, groups) * rows  # the most one program takes
    else:
        rows_per_program = triton.cdiv(triton.cdiv(m, groups), rows) * rows
        groups = triton.cdiv(m, rows_per_program)
    dw_float64 = m * n <= F64_ROWS_MAX_ELEMS
    return BackwardConfig(
        n,
        True,
        groups,
        rows_per_program,
        warps,
        False,
        dw_float64,
        stages,
        rows=rows,
        tma=True,
        strided=strided,
    )


def _launch_cluster_backward_config(
    m: int, n: int, device_index: int, plan: tuple[int, int, int, bool], per_sm: int | None
) -> BackwardConfig:
    """The BWD_CLUSTER_LAUNCH plan ``(block, warps, CTAs an SM, prefetch)`` for ``m`` rows of
    ``n``: ``cdiv(n, block)`` CTAs a row, a persistent grid of clusters, float32 dweight partials
    summed by the sum launch."""
    block, warps, plan_per_sm, prefetch = plan
    c = triton.cdiv(n, block)
    groups, rows_per_program = _cluster_grid(m, n, device_index, plan_per_sm, per_sm, c, m)
    return BackwardConfig(
        block, False, groups, rows_per_program, warps, False, False, cluster=c, prefetch=prefetch
    )


def _cluster_grid(
    m: int, n: int, device_index: int, plan_per_sm: int, per_sm: int | None, ctas: int, most: int
) -> tuple[int, int]:
    """``(groups, rows_per_program)`` of a persistent grid of ``ctas``-CTA clusters: the SMs'
    worth at ``per_sm`` (default ``plan_per_sm``) CTAs an SM, at most ``most`` clusters and as
    many float64 partial rows as DW_SCRATCH_BYTES holds, none without rows."""
    groups = sm_count(device_index) * (plan_per_sm if per_sm is None else per_sm) // ctas
    groups = max(1, min(groups, DW_SCRATCH_BYTES // (n * 8), most))
    rows_per_program = triton.cdiv(m, groups)
    return triton.cdiv(m, rows_per_program), rows_per_program


def _cluster_backward_config(
    m: int, n: int, device_index: int, per_sm: int | None
) -> BackwardConfig:
    """The BWD_CLUSTERS entry for ``m`` rows of ``n``: whole rows split over a cluster, a
    persistent grid, the sum finish (clusters never take the tree: BackwardConfig.check)."""
    block = triton.next_power_of_2(n)
    ctas, warps, plan_per_sm = BWD_CLUSTERS[block]  # CTAs per SM: programs are clusters
    most = max(1, m // MIN_ROWS_PER_PROGRAM)
    groups, rows_per_program = _cluster_grid(m, n, device_index, plan_per_sm, per_sm, ctas, most)
    dw_float64 = m * n <= F64_ROWS_MAX_ELEMS
    return BackwardConfig(
        block, True, groups, rows_per_program, warps, False, dw_float64, ctas=ctas
    )
