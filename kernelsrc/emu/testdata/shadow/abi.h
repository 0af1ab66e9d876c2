// The emulation driver's stand-in for kernelsrc/abi.h (emu_test.go puts this folder ahead
// of kernelsrc on the include path, so sampling.cu's #include "abi.h" lands here): the
// generated header itself, with GB_FILTER_LIST and GB_FILTER_MIN_CANDS read from
// variables that each job sets (emu_driver.cpp, gb_emu_filter), so that a test can run
// the filtered kernel with candidate lists far shorter than the ABI's and drive rows to
// the one-block path. The jobs of the ordinary tests set the ABI's values.
#include "../../../abi.h"

#undef GB_FILTER_LIST
#undef GB_FILTER_MIN_CANDS
#define GB_FILTER_LIST (gb_emu_filter::list)
#define GB_FILTER_MIN_CANDS (gb_emu_filter::min_cands)
#define GB_EMU_SHADOW_ABI 1
