// topk: the min(k, n) largest of n i32 values, descending, duplicates kept
// (spec/accelerators.md, id 3), for 1 <= k <= K_MAX.
//
// The k largest values seen so far are kept sorted, largest first, in a register chain
// of K_MAX entries. Each value is inserted in one cycle: every entry compares itself
// with the new value in parallel, the entries below the insertion point move down by
// one and the last one falls off. That is one value per cycle, 16 per 512-bit beat; the
// next beat is taken during the cycle that inserts the last value of the current one,
// so a full beat costs 16 cycles. After the last beat the chain is sent out 16 values
// per beat, shifting up by 16 entries per beat.
//
// k = 0, k > K_MAX and a payload that is not a whole number of i32 values are
// BAD_REQUEST: the payload is still drained, and the answer is one empty beat with
// status 1 in tuser.
module netaccel_topk #(
    parameter integer K_MAX = 64  // a multiple of 16
) (
    input  wire         clk,
    input  wire         rst_n,
    input  wire [511:0] s_axis_tdata,
    input  wire [63:0]  s_axis_tkeep,
    input  wire         s_axis_tlast,
    input  wire         s_axis_tvalid,
    output wire         s_axis_tready,
    output reg  [511:0] m_axis_tdata,
    output reg  [63:0]  m_axis_tkeep,
    output wire         m_axis_tlast,
    output wire         m_axis_tvalid,
    input  wire         m_axis_tready,
    output wire [15:0]  m_axis_tuser
);
    localparam [1:0] S_HEADER = 2'd0,  // waiting for the header beat
                     S_LOAD   = 2'd1,  // waiting for a payload beat
                     S_INSERT = 2'd2,  // inserting the values of `beat`, one per cycle
                     S_OUT    = 2'd3;  // sending the result

    reg [1:0]   state;
    reg [31:0]  k;
    reg         bad;          // BAD_REQUEST: the call is drained, not computed
    reg [511:0] beat;         // the payload beat being inserted
    reg [4:0]   beat_values;  // whole i32 values in `beat` (0..16)
    reg [3:0]   index;        // the value of `beat` inserted this cycle
    reg         beat_last;    // `beat` is the last of the call
    reg [7:0]   kept;         // entries of `top` holding a value, min(values seen, K_MAX)
    reg [7:0]   remaining;    // values still to send in S_OUT

    reg signed [31:0] top [0:K_MAX-1];

    wire [1:0]  header_len_low = s_axis_tdata[65:64];  // payload length, low bits
    localparam [7:0] KEPT_MAX = K_MAX[7:0];
    wire [31:0] header_k   = s_axis_tdata[191:160];

    // Whole values in the incoming beat: tkeep is contiguous from byte 0.
    reg [4:0] incoming_values;
    integer v;
    always @* begin
        incoming_values = 5'd0;
        for (v = 0; v < 16; v = v + 1)
            if (s_axis_tkeep[4*v+3]) incoming_values = incoming_values + 5'd1;
    end

    wire last_of_beat = {1'b0, index} + 5'd1 >= beat_values;
    // The next beat may come in while the last value of this one is inserted.
    assign s_axis_tready = state == S_HEADER || state == S_LOAD
                        || (state == S_INSERT && last_of_beat && !beat_last);
    wire s_fire = s_axis_tvalid && s_axis_tready;

    wire signed [31:0] value = beat[32*index +: 32];
    wire insert = state == S_INSERT && !bad && beat_values != 5'd0;

    // `above[i]`: the new value belongs at entry i or above it (an empty entry counts
    // as smaller than any value). The chain is sorted, so `above` is all zeros up to the
    // insertion point and all ones from there.
    reg [K_MAX-1:0] above;
    integer i;
    always @* begin
        for (i = 0; i < K_MAX; i = i + 1)
            above[i] = (i >= kept) || (value > top[i]);
    end

    wire [7:0] k_clamped = (k > {24'd0, kept}) ? kept : k[7:0];

    assign m_axis_tvalid = state == S_OUT;
    assign m_axis_tlast  = remaining <= 8'd16;
    assign m_axis_tuser  = bad ? 16'd1 : 16'd0;
    wire m_fire = m_axis_tvalid && m_axis_tready;

    integer o;
    always @* begin
        for (o = 0; o < 16; o = o + 1) begin
            m_axis_tdata[32*o +: 32] = top[o];
            m_axis_tkeep[4*o +: 4]   = (o < remaining) ? 4'hf : 4'h0;
        end
    end

    integer j;
    always @(posedge clk) begin
        if (!rst_n) begin
            state     <= S_HEADER;
            k         <= 32'd0;
            bad       <= 1'b0;
            beat_values <= 5'd0;
            index     <= 4'd0;
            beat_last <= 1'b0;
            kept      <= 8'd0;
            remaining <= 8'd0;
        end else begin
            case (state)
                S_HEADER: if (s_fire) begin
                    k    <= header_k;
                    bad  <= header_k == 32'd0 || header_k > K_MAX || header_len_low != 2'd0;
                    kept <= 8'd0;
                    if (s_axis_tlast) begin
                        remaining <= 8'd0;
                        state     <= S_OUT;
                    end else begin
                        state <= S_LOAD;
                    end
                end
                S_LOAD: if (s_fire) begin
                    beat        <= s_axis_tdata;
                    beat_values <= incoming_values;
                    beat_last   <= s_axis_tlast;
                    index       <= 4'd0;
                    state       <= S_INSERT;
                end
                S_INSERT: begin
                    if (insert && kept < KEPT_MAX) kept <= kept + 8'd1;
                    index <= index + 4'd1;
                    if (last_of_beat) begin
                        if (s_fire) begin
                            beat        <= s_axis_tdata;
                            beat_values <= incoming_values;
                            beat_last   <= s_axis_tlast;
                            index       <= 4'd0;
                        end else if (beat_last) begin
                            // `kept` grows this cycle when the last value is inserted.
                            remaining <= bad ? 8'd0
                                : (insert && kept < KEPT_MAX && k > {24'd0, kept}) ? kept + 8'd1
                                : k_clamped;
                            state <= S_OUT;
                        end else begin
                            state <= S_LOAD;
                        end
                    end
                end
                S_OUT: if (m_fire) begin
                    if (m_axis_tlast) begin
                        state     <= S_HEADER;
                        remaining <= 8'd0;
                    end else begin
                        remaining <= remaining - 8'd16;
                    end
                end
            endcase
        end
    end

    // The chain: insertion while computing, a shift by 16 entries per beat sent.
    always @(posedge clk) begin
        if (insert) begin
            for (j = 0; j < K_MAX; j = j + 1)
                if (above[j])
                    top[j] <= (j == 0 || !above[j == 0 ? 0 : j-1]) ? value : top[j == 0 ? 0 : j-1];
        end else if (m_fire && !m_axis_tlast) begin
            for (j = 0; j < K_MAX - 16; j = j + 1)
                top[j] <= top[j+16];
        end
    end
endmodule
