// The C ABI between a Verilated design and the netaccel RTL harness (crates/rtl).
//
// The harness loads one shared object per design at run time and talks to the model
// only through these functions, so the node never links a design at build time. The
// model's top is always `netaccel_shell`, a wrapper the harness generates around the
// user's module with the ports of spec/rtl-accelerators.md: a missing port or a port
// of the wrong width fails the Verilator build, before anything runs.
//
// One cycle: the harness sets the inputs, the model settles with clk low, the outputs
// are sampled (they are what the rising edge will see, so a handshake is
// valid && ready in this sample), then clk rises and the registers update.
#include <cstdint>
#include <cstring>

#include "Vshell.h"
#include "verilated.h"

#define NETACCEL_EXPORT extern "C" __attribute__((visibility("default")))

// Bumped when the structs or the functions below change; the harness refuses a shared
// object of another version.
static const uint32_t NETACCEL_RTL_ABI = 1;

struct netaccel_rtl_in {
    uint8_t s_tdata[64];
    uint64_t s_tkeep;
    uint8_t s_tlast;
    uint8_t s_tvalid;
    uint8_t m_tready;
    uint8_t rst_n;
};

struct netaccel_rtl_out {
    uint8_t m_tdata[64];
    uint64_t m_tkeep;
    uint8_t m_tlast;
    uint8_t m_tvalid;
    uint8_t s_tready;
    uint8_t pad;
    uint16_t m_tuser;
};

struct netaccel_rtl_model {
    VerilatedContext context;
    Vshell *top;
};

NETACCEL_EXPORT uint32_t netaccel_rtl_abi(void) { return NETACCEL_RTL_ABI; }

NETACCEL_EXPORT netaccel_rtl_model *netaccel_rtl_create(void) {
    netaccel_rtl_model *model = new netaccel_rtl_model();
    model->top = new Vshell(&model->context, "shell");
    model->top->clk = 0;
    model->top->rst_n = 0;
    model->top->eval();
    return model;
}

NETACCEL_EXPORT void netaccel_rtl_destroy(netaccel_rtl_model *model) {
    if (!model) return;
    model->top->final();
    delete model->top;
    delete model;
}

static void set_inputs(Vshell *top, const netaccel_rtl_in *in) {
    for (int word = 0; word < 16; word++) {
        uint32_t w;
        std::memcpy(&w, in->s_tdata + 4 * word, 4);
        top->s_axis_tdata[word] = w;
    }
    top->s_axis_tkeep = in->s_tkeep;
    top->s_axis_tlast = in->s_tlast;
    top->s_axis_tvalid = in->s_tvalid;
    top->m_axis_tready = in->m_tready;
    top->rst_n = in->rst_n;
}

// Holds `in` for `cycles` cycles (at least one) and returns in `out` the outputs
// sampled before the last rising edge. The model's state after a cycle only depends on
// the inputs, so several cycles at once are for reset and idle time, not for streaming.
NETACCEL_EXPORT void netaccel_rtl_step(netaccel_rtl_model *model, const netaccel_rtl_in *in,
                                       netaccel_rtl_out *out, uint64_t cycles) {
    Vshell *top = model->top;
    set_inputs(top, in);
    for (uint64_t c = 0; c < cycles; c++) {
        top->clk = 0;
        top->eval();
        if (c + 1 == cycles) {
            out->s_tready = top->s_axis_tready;
            out->m_tvalid = top->m_axis_tvalid;
            out->m_tlast = top->m_axis_tlast;
            out->m_tkeep = top->m_axis_tkeep;
            out->m_tuser = top->m_axis_tuser;
            if (out->m_tvalid) {
                for (int word = 0; word < 16; word++) {
                    uint32_t w = top->m_axis_tdata[word];
                    std::memcpy(out->m_tdata + 4 * word, &w, 4);
                }
            }
        }
        top->clk = 1;
        top->eval();
    }
}
