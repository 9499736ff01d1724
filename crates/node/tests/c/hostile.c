/* A remote OpenCL client whose kernel is hostile, or a well-behaved one. Usage:
 * hostile oob|null|trap|loop|good [rounds]. A hostile kind runs its kernel once and
 * prints the status clFinish returned ("finish: <code>"); it must get an error, not a
 * crash or a hang. "good" runs an increment kernel `rounds` times and checks the data
 * each time ("good: ok"). The program itself never does anything wrong: the kernels do,
 * on the device. */
#define CL_TARGET_OPENCL_VERSION 120
#include <CL/cl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(x)                                                                 \
    do {                                                                         \
        cl_int rc_ = (x);                                                        \
        if (rc_ != CL_SUCCESS) {                                                 \
            fprintf(stderr, "%s:%d: %s -> %d\n", __FILE__, __LINE__, #x, rc_);   \
            exit(1);                                                             \
        }                                                                        \
    } while (0)

static const char *SOURCES[][2] = {
    {"oob", "__kernel void k(__global int *v) {\n"
            "  for (long i = 0; i < (1L << 38); i += 1024) v[i * (1 + v[0])] = (int)i;\n"
            "}\n"},
    {"null", "__kernel void k(__global int *v) { *(__global int *)(size_t)v[0] = 42; }\n"},
    {"trap", "__kernel void k(__global int *v) { if (v[1] == 1) __builtin_trap(); v[0] = 1; }\n"},
    {"loop", "__kernel void k(__global int *v) { while (v[1] == 1) v[0]++; }\n"},
    {"good", "__kernel void k(__global int *v) { v[get_global_id(0)] += 1; }\n"},
};

int main(int argc, char **argv) {
    if (argc < 2) return 2;
    const char *src = NULL;
    for (size_t i = 0; i < sizeof SOURCES / sizeof SOURCES[0]; i++)
        if (strcmp(argv[1], SOURCES[i][0]) == 0) src = SOURCES[i][1];
    if (!src) return 2;
    int rounds = argc > 2 ? atoi(argv[2]) : 1;
    cl_platform_id platform;
    cl_device_id device;
    cl_int err;
    CHECK(clGetPlatformIDs(1, &platform, NULL));
    CHECK(clGetDeviceIDs(platform, CL_DEVICE_TYPE_ALL, 1, &device, NULL));
    cl_context ctx = clCreateContext(NULL, 1, &device, NULL, NULL, &err);
    CHECK(err);
    cl_command_queue q = clCreateCommandQueue(ctx, device, 0, &err);
    CHECK(err);
    enum { N = 1024 };
    static int data[N];
    data[1] = 1; /* the hostile kernels' trigger; v[0] = 0 is their null pointer */
    cl_mem buf = clCreateBuffer(ctx, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, sizeof data, data, &err);
    CHECK(err);
    cl_program p = clCreateProgramWithSource(ctx, 1, &src, NULL, &err);
    CHECK(err);
    CHECK(clBuildProgram(p, 1, &device, NULL, NULL, NULL));
    cl_kernel k = clCreateKernel(p, "k", &err);
    CHECK(err);
    CHECK(clSetKernelArg(k, 0, sizeof buf, &buf));
    if (strcmp(argv[1], "good") != 0) {
        size_t one = 1;
        CHECK(clEnqueueNDRangeKernel(q, k, 1, NULL, &one, NULL, 0, NULL, NULL));
        cl_int rc = clFinish(q);
        printf("finish: %d\n", rc);
        return 0;
    }
    size_t global = N;
    for (int r = 1; r <= rounds; r++) {
        CHECK(clEnqueueNDRangeKernel(q, k, 1, NULL, &global, NULL, 0, NULL, NULL));
        static int out[N];
        CHECK(clEnqueueReadBuffer(q, buf, CL_TRUE, 0, sizeof out, out, 0, NULL, NULL));
        for (int i = 0; i < N; i++) {
            int want = (i == 1 ? 1 : 0) + r;
            if (out[i] != want) {
                printf("good: round %d int %d is %d, not %d\n", r, i, out[i], want);
                return 1;
            }
        }
    }
    printf("good: ok\n");
    return 0;
}
