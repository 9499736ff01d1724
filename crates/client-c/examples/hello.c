/* Calls two accelerators of a netaccel node from C: one call and its output, then
 * sixteen pipelined calls whose results come back in completion order.
 *
 *   cc hello.c $(pkg-config --cflags --libs netaccel) -o hello
 *   ./hello 127.0.0.1:9400
 */
#include <stdio.h>
#include <string.h>

#include <netaccel.h>

int main(int argc, char **argv) {
    netaccel_error err;
    netaccel_client *node = netaccel_connect(argc > 1 ? argv[1] : "127.0.0.1:9400", NULL, &err);
    if (!node) {
        fprintf(stderr, "connect: %s (%s)\n", err.message, netaccel_kind_name(err.kind));
        return 1;
    }
    int32_t values[] = {5, -3, 9, 9, 0, 2};
    netaccel_buffer top;
    if (netaccel_call(node, "topk", "k=3", (const uint8_t *)values, sizeof values, 0, &top, &err)) {
        fprintf(stderr, "topk: %s (%s)\n", err.message, netaccel_kind_name(err.kind));
        return 1;
    }
    const int32_t *best = (const int32_t *)top.data;
    printf("topk k=3: %d %d %d\n", best[0], best[1], best[2]);
    netaccel_buffer_free(&top);

    const char *word = "pipelined";
    for (int i = 0; i < 16; i++) {
        uint64_t ticket;
        if (netaccel_submit(node, "to_uppercase", NULL, (const uint8_t *)word, strlen(word), 0, &ticket, &err))
            return fprintf(stderr, "submit: %s\n", err.message), 1;
    }
    int answered = 0;
    uint64_t ticket;
    netaccel_buffer out;
    while (netaccel_poll(node, -1, &ticket, &out, &err) == NETACCEL_OK) {
        answered += out.len == strlen(word) && memcmp(out.data, "PIPELINED", out.len) == 0;
        netaccel_buffer_free(&out);
    }
    printf("%d of 16 pipelined calls answered PIPELINED\n", answered);
    netaccel_close(node);
    return answered == 16 ? 0 : 1;
}
