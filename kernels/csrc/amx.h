// Intel AMX tile setup shared by sprig's C kernels: every kernel uses eight 16-row x 64-byte tiles.
#ifndef SPRIG_AMX_H
#define SPRIG_AMX_H
#include <stdint.h>
#include <string.h>

#if defined(__AMX_TILE__) && defined(__AMX_BF16__) && defined(__AVX512BF16__)
#define SPRIG_AMX 1
#include <immintrin.h>

typedef struct {
    uint8_t palette_id;
    uint8_t start_row;
    uint8_t reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} tile_config;

// Tile configuration is per thread: call at the start of every parallel region that uses tiles. The config lives
// in static data: built on the stack, gcc may drop the stores to it, since it does not see LDTILECFG read them.
static inline void amx_load_config(void) {
    static const tile_config cfg = {
        .palette_id = 1,
        .colsb = {64, 64, 64, 64, 64, 64, 64, 64},
        .rows = {16, 16, 16, 16, 16, 16, 16, 16},
    };
    _tile_loadconfig(&cfg);
}
#endif

// 0 when this process may use AMX tiles (Linux grants the tile state on request), else nonzero (amx_gemm.c).
int amx_gemm_available(void);
#endif
