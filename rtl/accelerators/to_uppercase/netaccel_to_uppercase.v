// to_uppercase: bytes a-z minus 0x20, every other byte unchanged (spec/accelerators.md,
// id 2).
//
// All 64 bytes of a beat are converted in parallel. The header beat is consumed and not
// answered; every payload beat goes to the output through one register stage, so the
// design keeps the stream going at one beat per cycle when neither side applies
// back-pressure. An empty payload (the header beat
// carries tlast) is answered with one beat of tkeep = 0.
module netaccel_to_uppercase (
    input  wire         clk,
    input  wire         rst_n,
    input  wire [511:0] s_axis_tdata,
    input  wire [63:0]  s_axis_tkeep,
    input  wire         s_axis_tlast,
    input  wire         s_axis_tvalid,
    output wire         s_axis_tready,
    output reg  [511:0] m_axis_tdata,
    output reg  [63:0]  m_axis_tkeep,
    output reg          m_axis_tlast,
    output reg          m_axis_tvalid,
    input  wire         m_axis_tready,
    output wire [15:0]  m_axis_tuser
);
    // Set once the header beat of the current call has been taken.
    reg in_payload;

    // The output register can take a new beat when it is empty or being emptied.
    assign s_axis_tready = !m_axis_tvalid || m_axis_tready;
    assign m_axis_tuser = 16'd0;

    // The payload beat with every lowercase ASCII letter made uppercase.
    reg [511:0] upper;
    integer i;
    always @* begin
        for (i = 0; i < 64; i = i + 1) begin
            upper[8*i +: 8] = s_axis_tdata[8*i +: 8];
            if (s_axis_tdata[8*i +: 8] >= 8'h61 && s_axis_tdata[8*i +: 8] <= 8'h7a)
                upper[8*i +: 8] = s_axis_tdata[8*i +: 8] - 8'h20;
        end
    end

    always @(posedge clk) begin
        if (!rst_n) begin
            // Only the control state is reset: the data registers are ignored while
            // m_axis_tvalid is low, and a reset on 577 flip-flops costs logic.
            in_payload    <= 1'b0;
            m_axis_tvalid <= 1'b0;
        end else begin
            if (m_axis_tvalid && m_axis_tready) m_axis_tvalid <= 1'b0;
            if (s_axis_tvalid && s_axis_tready) begin
                if (!in_payload) begin
                    if (s_axis_tlast) begin
                        m_axis_tvalid <= 1'b1;
                        m_axis_tdata  <= 512'd0;
                        m_axis_tkeep  <= 64'd0;
                        m_axis_tlast  <= 1'b1;
                    end else begin
                        in_payload <= 1'b1;
                    end
                end else begin
                    m_axis_tvalid <= 1'b1;
                    m_axis_tdata  <= upper;
                    m_axis_tkeep  <= s_axis_tkeep;
                    m_axis_tlast  <= s_axis_tlast;
                    if (s_axis_tlast) in_payload <= 1'b0;
                end
            end
        end
    end
endmodule
