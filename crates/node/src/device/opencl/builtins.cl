// The seven built-in accelerators as OpenCL C kernels (OpenCL C 1.2, no extensions).
// Their outputs follow spec/accelerators.md: bytes for echo, to_uppercase, topk and
// sobel; the stated accuracy for logit, minmax and matmul. The node checks params and
// payload lengths before a call reaches a kernel (the built-ins' own checks), so the
// kernels only guard the ragged end of the global range.

kernel void echo(global const uchar *in, global uchar *out, uint n) {
    size_t i = get_global_id(0);
    if (i < n) out[i] = in[i];
}

kernel void to_uppercase(global const uchar *in, global uchar *out, uint n) {
    size_t i = get_global_id(0);
    if (i < n) {
        uchar b = in[i];
        // Bit 5 is the case bit of ASCII letters; only a-z lose it.
        out[i] = (uchar)(b - 'a') < 26 ? (uchar)(b ^ 0x20) : b;
    }
}

// Sifts out[at] down the min-heap out[0..len).
static void sift_down(global int *heap, uint at, uint len) {
    for (;;) {
        uint smallest = at, l = 2 * at + 1, r = l + 1;
        if (l < len && heap[l] < heap[smallest]) smallest = l;
        if (r < len && heap[r] < heap[smallest]) smallest = r;
        if (smallest == at) return;
        int t = heap[at];
        heap[at] = heap[smallest];
        heap[smallest] = t;
        at = smallest;
    }
}

// One work-item: a min-heap of the min(k, n) largest values kept in the output, then
// heap-sorted in place, which leaves them in descending order.
kernel void topk(global const int *in, global int *out, uint k, uint n_bytes) {
    if (get_global_id(0) != 0) return;
    uint n = n_bytes / 4;
    uint m = min(k, n);
    if (m == 0) return;
    for (uint i = 0; i < m; i++) out[i] = in[i];
    for (uint i = m / 2; i-- > 0;) sift_down(out, i, m);
    for (uint i = m; i < n; i++) {
        if (in[i] > out[0]) {
            out[0] = in[i];
            sift_down(out, 0, m);
        }
    }
    for (uint end = m - 1; end > 0; end--) {
        int t = out[0];
        out[0] = out[end];
        out[end] = t;
        sift_down(out, 0, end);
    }
}

// ln(c / (1 - c)) with c = clamp(x, eps, 1 - eps); eps = 0 means 1e-6. The upper
// clamp is the first float at or above 1 - eps in exact arithmetic (1 - eps rounded
// to float moves the clamped output by 0.013 for eps = 1e-6), and the clamped outputs
// are computed from eps with log1p so that 1 - eps stays exact. NaN falls through
// both comparisons and comes out NaN.
kernel void logit(global const float *in, global float *out, float eps, uint n_bytes) {
    size_t i = get_global_id(0);
    if (i >= n_bytes / 4) return;
    if (eps == 0.0f) eps = 1e-6f;
    float high = 1.0f - eps;
    // Fast2Sum: 1 - eps == high + err exactly; err > 0 means high was rounded down.
    float err = -eps - (high - 1.0f);
    if (err > 0.0f) high = nextafter(high, 2.0f);
    float high_out = log1p(-eps) - log(eps);
    float x = in[i];
    float y;
    if (x <= eps) {
        y = -high_out;
    } else if (x >= high) {
        y = high_out;
    } else {
        y = log(x / (1.0f - x));
    }
    out[i] = y;
}

#define MINMAX_GROUP 64

// One work-group of MINMAX_GROUP items: a strided pass for min, max and finiteness,
// a tree reduction in local memory, then the normalisation. A non-finite input
// leaves NaN in out[0], which the node turns into BAD_REQUEST (a finite input never
// produces NaN: the range is halved when max - min overflows).
kernel void minmax(global const float *in, global float *out, uint n_bytes) {
    local float lmin[MINMAX_GROUP];
    local float lmax[MINMAX_GROUP];
    local int lbad[MINMAX_GROUP];
    uint n = n_bytes / 4;
    uint lid = get_local_id(0);
    float mn = INFINITY, mx = -INFINITY;
    int bad = 0;
    for (uint i = lid; i < n; i += MINMAX_GROUP) {
        float x = in[i];
        bad |= !isfinite(x);
        mn = fmin(mn, x);
        mx = fmax(mx, x);
    }
    lmin[lid] = mn;
    lmax[lid] = mx;
    lbad[lid] = bad;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (uint s = MINMAX_GROUP / 2; s > 0; s /= 2) {
        if (lid < s) {
            lmin[lid] = fmin(lmin[lid], lmin[lid + s]);
            lmax[lid] = fmax(lmax[lid], lmax[lid + s]);
            lbad[lid] |= lbad[lid + s];
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    mn = lmin[0];
    mx = lmax[0];
    if (lbad[0]) {
        if (lid == 0 && n > 0) out[0] = NAN;
        return;
    }
    if (!(mn < mx)) {
        for (uint i = lid; i < n; i += MINMAX_GROUP) out[i] = 0.0f;
        return;
    }
    float scale = isfinite(mx - mn) ? 1.0f : 0.5f;
    float low = mn * scale;
    float range = mx * scale - mn * scale;
    for (uint i = lid; i < n; i += MINMAX_GROUP) out[i] = (in[i] * scale - low) / range;
}

// min(255, |gx| + |gy|) for interior pixels, 0 on the border.
kernel void sobel(global const uchar *in, global uchar *out, uint w, uint h) {
    uint x = get_global_id(0), y = get_global_id(1);
    if (x >= w || y >= h) return;
    size_t at = (size_t)y * w + x;
    if (x == 0 || y == 0 || x == w - 1 || y == h - 1) {
        out[at] = 0;
        return;
    }
    global const uchar *up = in + at - w, *mid = in + at, *down = in + at + w;
    int gx = -up[-1] + up[1] - 2 * mid[-1] + 2 * mid[1] - down[-1] + down[1];
    int gy = -up[-1] - 2 * up[0] - up[1] + down[-1] + 2 * down[0] + down[1];
    out[at] = (uchar)min(255u, abs(gx) + abs(gy));
}

// C = A * B, n x n floats row-major; A then B in the payload.
kernel void matmul(global const float *in, global float *out, uint n) {
    uint i = get_global_id(1), j = get_global_id(0);
    if (i >= n || j >= n) return;
    global const float *a = in + (size_t)i * n, *b = in + (size_t)n * n + j;
    float acc = 0.0f;
    for (uint k = 0; k < n; k++) acc = fma(a[k], b[(size_t)k * n], acc);
    out[(size_t)i * n + j] = acc;
}
