// The logit processors and the observations (ABI.md, "Processed logits"): bias,
// penalties, then the allowed-token mask and the token bitmask, each operation its own
// statement and rounding; a row's observations of its processed logits decide its status.

// What one row needs to turn a logit into its processed logit x'.
struct gb_processor {
    uint flags;
    float repetition;
    float frequency;
    float presence;
    device const float* bias;   // the row's V entries (GB_FLAG_BIAS)
    device const uint* counts;  // the row's V entries (GB_FLAG_PENALTIES)
    device const uint* mask;    // the row's ceil(V/32) words (GB_FLAG_MASK)
    device const uint* bitmask; // the ceil(V/32) words of mask row bitmask_row (GB_FLAG_BITMASK)
};

inline gb_processor gb_processor_of(thread const gb_row_params& p, device const float* bias, device const uint* counts,
                                    device const uint* mask, device const uint* bitmask, uint vocab) {
    const uint f = p.flags;
    ulong r = ulong(p.row);
    ulong words = (ulong(vocab) + 31ul) / 32ul;
    // A buffer whose feature is off may be 8 bytes long: no pointer into it is formed.
    return gb_processor{f,
                        p.repetition_penalty,
                        p.frequency_penalty,
                        p.presence_penalty,
                        (f & GB_FLAG_BIAS) != 0u ? bias + r * ulong(vocab) : bias,
                        (f & GB_FLAG_PENALTIES) != 0u ? counts + r * ulong(vocab) : counts,
                        (f & GB_FLAG_MASK) != 0u ? mask + r * words : mask,
                        (f & GB_FLAG_BITMASK) != 0u ? bitmask + ulong(p.bitmask_row) * words : bitmask};
}

// The logit of element i after bias and penalties (the value the observations see).
inline float gb_unmasked(float x, uint i, gb_processor P) {
    if ((P.flags & GB_FLAG_BIAS) != 0u) {
        x = x + P.bias[i];
    }
    if ((P.flags & GB_FLAG_PENALTIES) != 0u) {
        uint c = P.counts[i];
        uint out = c & GB_COUNT_MASK;
        if (c != 0u && P.repetition != 1.0f) {
            if (x > 0.0f) {
                x = gb_div_rn(x, P.repetition);
            } else {
                x = x * P.repetition;
            }
        }
        if (out > 0u) {
            float f = P.frequency * float(out);
            x = x - f;
            x = x - P.presence;
        }
    }
    return x;
}

// The word of allowed bits (mask and bitmask together) that holds element i; all ones
// for a row without either.
inline uint gb_mask_word(uint i, gb_processor P) {
    uint w = 0xFFFFFFFFu;
    if ((P.flags & GB_FLAG_MASK) != 0u) {
        w = P.mask[i >> 5];
    }
    if ((P.flags & GB_FLAG_BITMASK) != 0u) {
        w &= P.bitmask[i >> 5];
    }
    return w;
}

// Whether the row's mask and bitmask let element i through.
inline bool gb_allowed(uint i, gb_processor P) {
    return ((gb_mask_word(i, P) >> (i & 31u)) & 1u) != 0u;
}

// The processed logit x' of element i.
inline float gb_processed(float x, uint i, gb_processor P) {
    if ((P.flags & GB_FLAGS_PROCESSORS) == 0u) {
        return x;
    }
    float v = gb_unmasked(x, i, P);
    return gb_allowed(i, P) ? v : -INFINITY;
}

// The observations of one processed logit.
inline uint gb_seen(float x) {
    if (isnan(x) || x == INFINITY) {
        return GB_SEEN_NONFINITE;
    }
    return x != -INFINITY ? GB_SEEN_FINITE : 0u;
}

// The processed logit x' of element i, with its observations ORed into seen: a NaN or
// +Inf counts whether masked or not, and a masked element is not finite.
inline float gb_process_seen(float x, uint i, gb_processor P, thread uint& seen) {
    if ((P.flags & GB_FLAGS_PROCESSORS) == 0u) {
        seen |= gb_seen(x);
        return x;
    }
    float v = gb_unmasked(x, i, P);
    if (!gb_allowed(i, P)) {
        seen |= gb_seen(v) & GB_SEEN_NONFINITE;
        return -INFINITY;
    }
    seen |= gb_seen(v);
    return v;
}
