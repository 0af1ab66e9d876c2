// The bit patterns of expNonPositive's constants (lse.go), shared by the assembly
// log-sum-exp (lse_amd64.s) and weights (weights_amd64.s): 64/ln 2; ln 2/64 to 32
// significant bits (hi) and the rest (lo); then the series' 1, 1/2, 1/6, 1/24, 1/120.
#define EXP_INVSTEP $0x40571547652b82fe
#define EXP_HI $0x3f862e42fee00000
#define EXP_LO $0x3d8a39ef35793c76
#define EXP_ONE $0x3ff0000000000000
#define EXP_HALF $0x3fe0000000000000
#define EXP_SIXTH $0x3fc5555555555555
#define EXP_24 $0x3fa5555555555555
#define EXP_120 $0x3f81111111111111
