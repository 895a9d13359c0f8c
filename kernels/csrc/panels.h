// Blocking shared by the kernels that stream a weight in panels (vec_gemm.c: bf16, int8_gemm.c: int8).
#ifndef SPRIG_PANELS_H
#define SPRIG_PANELS_H

#define PANEL 16     /* output columns per panel */
#define GROUP 4      /* panels one work item reads together: four independent accumulator chains per row */
#define ROWS 6       /* activation rows per pass over a group's weight (it stays in L2 between passes) */

/* Return kernel(a, k, rows, w, np, sums) with a constant row count when it reads a whole group: fully unrolled,
 * accumulators in registers. */
#define WITH_CONSTANT_ROWS(kernel, a, k, rows, w, np, sums)                          \
    do {                                                                             \
        if (np != GROUP) {                                                           \
            kernel(a, k, rows, w, np, sums);                                         \
            return;                                                                  \
        }                                                                            \
        switch (rows) {                                                              \
            case 1: kernel(a, k, 1, w, GROUP, sums); return;                         \
            case 2: kernel(a, k, 2, w, GROUP, sums); return;                         \
            case 3: kernel(a, k, 3, w, GROUP, sums); return;                         \
            case 4: kernel(a, k, 4, w, GROUP, sums); return;                         \
            case 5: kernel(a, k, 5, w, GROUP, sums); return;                         \
            default: kernel(a, k, 6, w, GROUP, sums); return;                        \
        }                                                                            \
    } while (0)
#endif
