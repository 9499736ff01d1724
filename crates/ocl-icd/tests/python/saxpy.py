"""pyopencl on the first OpenCL platform: saxpy and a reduction, checked against numpy.

Prints the platform-independent results only, so that runs on local PoCL and through
the netaccel ICD can be compared byte for byte.
"""
import numpy as np
import pyopencl as cl

platform = cl.get_platforms()[0]
device = platform.get_devices()[0]
ctx = cl.Context([device])
queue = cl.CommandQueue(ctx)

n = 1 << 18
x = np.arange(n, dtype=np.float32) * 0.5
y = np.linspace(1.0, 2.0, n, dtype=np.float32)
mf = cl.mem_flags
dx = cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=x)
dy = cl.Buffer(ctx, mf.READ_WRITE | mf.COPY_HOST_PTR, hostbuf=y)
program = cl.Program(ctx, """
__kernel void saxpy(float a, __global const float *x, __global float *y) {
    size_t i = get_global_id(0);
    y[i] = a * x[i] + y[i];
}
__kernel void partial_sum(__global const float *v, __global float *out, __local float *scratch) {
    size_t l = get_local_id(0);
    scratch[l] = v[get_global_id(0)];
    barrier(CLK_LOCAL_MEM_FENCE);
    for (size_t s = get_local_size(0) / 2; s > 0; s /= 2) {
        if (l < s) scratch[l] += scratch[l + s];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (l == 0) out[get_group_id(0)] = scratch[0];
}
""").build()
program.saxpy(queue, (n,), None, np.float32(3.0), dx, dy)
result = np.empty_like(y)
cl.enqueue_copy(queue, result, dy)
expected = np.float32(3.0) * x + y
print("saxpy matches numpy:", bool(np.array_equal(result, expected)))

groups = n // 256
dout = cl.Buffer(ctx, mf.WRITE_ONLY, groups * 4)
program.partial_sum(queue, (n,), (256,), dy, dout, cl.LocalMemory(256 * 4))
partial = np.empty(groups, dtype=np.float32)
cl.enqueue_copy(queue, partial, dout).wait()
print("partial sums close to numpy:", bool(np.allclose(partial, expected.reshape(groups, 256).sum(axis=1), rtol=1e-5)))
print("device:", device.name)
print("first results:", " ".join("%.2f" % v for v in result[:4]))
