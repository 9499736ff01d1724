// minmax: n f32 values x -> (x - min) / (max - min), all 0.0 when max = min, within
// 1e-6 of the exact result (spec/accelerators.md, id 5).
//
// Two passes, as the result depends on every value: the payload is stored in a block
// RAM of DEPTH_BEATS beats (64 KiB by default) while its minimum and maximum are found,
// 16 values per beat, at one beat per cycle. Then each value is normalised, one per
// cycle, without a floating-point unit:
//
// * every value is turned into a signed fixed-point integer X relative to the largest
//   exponent E among min and max: X = x * 2^(179 - E) (E biased), exact for values
//   within 29 binades of the largest, truncated below that. max - min is at least
//   2^(E-151) when it is not zero, so the truncation moves the result by less than
//   2^-27;
// * D = Xmax - Xmin is normalised so that its top bit is set, and 32 bits of it are
//   inverted once per call by a bit-serial divider (R = 2^63 / D', 64 cycles);
// * each d = X - Xmin, normalised by the same shift, is multiplied by R, and the product
//   (0..1 with 32 fraction bits) is turned into an f32 by truncation: together within
//   2^-22 of the exact quotient, well inside the 1e-6 the spec allows.
//
// A payload that is not a whole number of f32 values, longer than DEPTH_BEATS beats, or
// with a NaN or an infinity is BAD_REQUEST: it is drained and answered with one empty
// beat and status 1 in tuser.
//
// The fixed-point datapath keeps only the bits that matter: Verilator's -Wall would
// list the dropped low bits of each intermediate one by one.
/* verilator lint_off UNUSEDSIGNAL */
module netaccel_minmax #(
    parameter integer DEPTH_BEATS = 1024,
    parameter integer ADDR_BITS   = 10    // log2(DEPTH_BEATS)
) (
    input  wire         clk,
    input  wire         rst_n,
    input  wire [511:0] s_axis_tdata,
    input  wire [63:0]  s_axis_tkeep,
    input  wire         s_axis_tlast,
    input  wire         s_axis_tvalid,
    output wire         s_axis_tready,
    output wire [511:0] m_axis_tdata,
    output reg  [63:0]  m_axis_tkeep,
    output wire         m_axis_tlast,
    output wire         m_axis_tvalid,
    input  wire         m_axis_tready,
    output wire [15:0]  m_axis_tuser
);
    localparam [2:0] S_HEADER = 3'd0,  // waiting for the header beat
                     S_STORE  = 3'd1,  // storing payload beats, tracking min and max
                     S_PREP   = 3'd2,  // fixed-point min, max and their difference
                     S_DIVIDE = 3'd3,  // R = 2^63 / D', one quotient bit per cycle
                     S_FETCH  = 3'd4,  // reading a stored beat
                     S_CALC   = 3'd5,  // normalising its values, one per cycle
                     S_SEND   = 3'd6,  // sending the normalised beat
                     S_EMPTY  = 3'd7;  // sending one empty beat (n = 0, or BAD_REQUEST)

    reg [2:0] state;
    reg       bad;
    reg       have_value;     // min and max hold a value of this call
    reg [31:0] min_f, max_f;  // as f32 bit patterns
    reg [ADDR_BITS:0] beats;  // payload beats stored
    reg [4:0] last_values;    // values in the last beat
    reg [ADDR_BITS:0] addr;   // beat being normalised
    reg [3:0] lane;           // value of that beat being normalised

    reg [511:0] ram [0:DEPTH_BEATS-1];
    reg [511:0] stored;       // the beat read from `ram`
    reg [511:0] result;       // the normalised beat

    // --- f32 helpers --------------------------------------------------------------
    // A key that orders f32 bit patterns as the numbers they stand for (-0 < +0).
    function [31:0] order_key(input [31:0] x);
        order_key = x[31] ? ~x : {1'b1, x[30:0]};
    endfunction

    // The exponent field, with subnormals at exponent 1 (their scale).
    function [7:0] scale_exp(input [31:0] x);
        scale_exp = x[30:23] == 8'd0 ? 8'd1 : x[30:23];
    endfunction

    // x * 2^(179 - e_max) as a signed integer; e_max >= scale_exp(x).
    function signed [55:0] to_fixed(input [31:0] x, input [7:0] e_max);
        reg [52:0] aligned;
        reg [7:0]  shift;
        begin
            shift   = e_max - scale_exp(x);
            aligned = {x[30:23] != 8'd0, x[22:0], 29'd0} >> shift;
            to_fixed = x[31] ? -$signed({3'd0, aligned}) : $signed({3'd0, aligned});
        end
    endfunction

    // Leading zeros of a 56-bit value (56 for zero).
    function [5:0] leading_zeros(input [55:0] x);
        integer b;
        reg found;
        begin
            leading_zeros = 6'd56;
            found = 1'b0;
            for (b = 55; b >= 0; b = b - 1)
                if (!found && x[b]) begin
                    leading_zeros = 6'd55 - b[5:0];
                    found = 1'b1;
                end
        end
    endfunction

    // q * 2^-32 as an f32, truncated; q <= 2^32.
    function [31:0] fraction_to_f32(input [33:0] q);
        integer b;
        reg [5:0] top;
        reg found;
        reg [33:0] mant;
        begin
            top = 6'd0;
            found = 1'b0;
            for (b = 33; b >= 0; b = b - 1)
                if (!found && q[b]) begin
                    top = b[5:0];
                    found = 1'b1;
                end
            mant = top >= 6'd23 ? q >> (top - 6'd23) : q << (6'd23 - top);
            fraction_to_f32 = found ? {1'b0, 8'd95 + {2'd0, top}, mant[22:0]} : 32'd0;
        end
    endfunction

    // --- pass 1: min, max, finiteness of a beat ------------------------------------
    reg [31:0] beat_min, beat_max;
    reg        beat_any, beat_finite;
    reg [4:0]  incoming_values;
    integer v;
    always @* begin
        beat_min = 32'd0;
        beat_max = 32'd0;
        beat_any = 1'b0;
        beat_finite = 1'b1;
        incoming_values = 5'd0;
        for (v = 0; v < 16; v = v + 1)
            if (s_axis_tkeep[4*v+3]) begin
                incoming_values = incoming_values + 5'd1;
                if (s_axis_tdata[32*v+23 +: 8] == 8'hff) beat_finite = 1'b0;
                if (!beat_any || order_key(s_axis_tdata[32*v +: 32]) < order_key(beat_min))
                    beat_min = s_axis_tdata[32*v +: 32];
                if (!beat_any || order_key(s_axis_tdata[32*v +: 32]) > order_key(beat_max))
                    beat_max = s_axis_tdata[32*v +: 32];
                beat_any = 1'b1;
            end
    end

    wire [31:0] header_len = s_axis_tdata[95:64];
    localparam [31:0] MAX_BYTES = DEPTH_BEATS * 64;

    assign s_axis_tready = state == S_HEADER || state == S_STORE;
    wire s_fire = s_axis_tvalid && s_axis_tready;

    // --- constants of the call ---------------------------------------------------
    wire [7:0] e_max = scale_exp(min_f) > scale_exp(max_f) ? scale_exp(min_f) : scale_exp(max_f);
    reg signed [55:0] x_min;
    reg [5:0]  norm_shift;   // leading zeros of D
    reg [31:0] d_top;        // D', the top 32 bits of the normalised D
    reg [32:0] recip;        // R = 2^63 / D'
    reg [32:0] remainder;
    reg [6:0]  divide_bit;
    reg        constant;     // max = min: every result is 0.0

    wire signed [55:0] x_max_now = to_fixed(max_f, e_max);
    wire signed [55:0] x_min_now = to_fixed(min_f, e_max);
    wire [55:0] span_now = x_max_now - x_min_now;
    wire [55:0] span_norm = span_now << leading_zeros(span_now);

    // --- pass 2: one value per cycle ----------------------------------------------
    wire [31:0] x = stored[32*lane +: 32];
    wire signed [55:0] x_fixed = to_fixed(x, e_max);
    wire [55:0] d = x_fixed - x_min;
    wire [55:0] d_norm = d << norm_shift;
    wire [64:0] product = d_norm[55:24] * recip;
    wire [31:0] normalised = constant ? 32'd0 : fraction_to_f32(product[64:31]);
    wire [4:0]  values_here = addr + 1 == beats ? last_values : 5'd16;
    wire        lane_last = {1'b0, lane} + 5'd1 >= values_here;

    assign m_axis_tvalid = state == S_SEND || state == S_EMPTY;
    assign m_axis_tdata  = result;
    assign m_axis_tlast  = state == S_EMPTY || addr + 1 == beats;
    assign m_axis_tuser  = (state == S_EMPTY && bad) ? 16'd1 : 16'd0;
    wire m_fire = m_axis_tvalid && m_axis_tready;

    integer o;
    always @* begin
        for (o = 0; o < 16; o = o + 1)
            m_axis_tkeep[4*o +: 4] = (state == S_SEND && o < values_here) ? 4'hf : 4'h0;
    end

    always @(posedge clk) begin
        if (s_fire && state == S_STORE && !bad)
            ram[beats[ADDR_BITS-1:0]] <= s_axis_tdata;
        if (state == S_FETCH)
            stored <= ram[addr[ADDR_BITS-1:0]];
        if (state == S_CALC)
            result[32*lane +: 32] <= normalised;
    end

    always @(posedge clk) begin
        if (!rst_n) begin
            state <= S_HEADER;
            bad <= 1'b0;
            have_value <= 1'b0;
            min_f <= 32'd0;
            max_f <= 32'd0;
            beats <= 0;
            last_values <= 5'd0;
            addr <= 0;
            lane <= 4'd0;
            x_min <= 56'sd0;
            norm_shift <= 6'd0;
            d_top <= 32'd0;
            recip <= 33'd0;
            remainder <= 33'd0;
            divide_bit <= 7'd0;
            constant <= 1'b0;
        end else begin
            case (state)
                S_HEADER: if (s_fire) begin
                    bad <= header_len[1:0] != 2'd0 || header_len > MAX_BYTES;
                    have_value <= 1'b0;
                    beats <= 0;
                    state <= s_axis_tlast ? S_EMPTY : S_STORE;
                end
                S_STORE: if (s_fire) begin
                    if (!beat_finite) bad <= 1'b1;
                    if (beat_any) begin
                        if (!have_value || order_key(beat_min) < order_key(min_f)) min_f <= beat_min;
                        if (!have_value || order_key(beat_max) > order_key(max_f)) max_f <= beat_max;
                        have_value <= 1'b1;
                    end
                    beats <= beats + 1;
                    last_values <= incoming_values;
                    if (s_axis_tlast) state <= S_PREP;
                end
                S_PREP: begin
                    x_min <= x_min_now;
                    norm_shift <= leading_zeros(span_now);
                    d_top <= span_norm[55:24];
                    constant <= span_now == 56'd0;
                    recip <= 33'd0;
                    remainder <= 33'd0;
                    divide_bit <= 7'd63;
                    addr <= 0;
                    lane <= 4'd0;
                    state <= (bad || !have_value) ? S_EMPTY
                           : span_now == 56'd0 ? S_FETCH : S_DIVIDE;
                end
                S_DIVIDE: begin
                    // Restoring division of 2^63 by d_top, most significant bit first.
                    if ({remainder[31:0], divide_bit == 7'd63} >= {1'b0, d_top}) begin
                        remainder <= {remainder[31:0], divide_bit == 7'd63} - {1'b0, d_top};
                        if (divide_bit <= 7'd32) recip[divide_bit[5:0]] <= 1'b1;
                    end else begin
                        remainder <= {remainder[31:0], divide_bit == 7'd63};
                    end
                    divide_bit <= divide_bit - 7'd1;
                    if (divide_bit == 7'd0) state <= S_FETCH;
                end
                S_FETCH: begin
                    lane <= 4'd0;
                    state <= S_CALC;
                end
                S_CALC: begin
                    lane <= lane + 4'd1;
                    if (lane_last) state <= S_SEND;
                end
                S_SEND: if (m_fire) begin
                    if (m_axis_tlast) begin
                        state <= S_HEADER;
                    end else begin
                        addr <= addr + 1;
                        state <= S_FETCH;
                    end
                end
                S_EMPTY: if (m_fire) state <= S_HEADER;
                default: state <= S_HEADER;
            endcase
        end
    end
endmodule
/* verilator lint_on UNUSEDSIGNAL */
