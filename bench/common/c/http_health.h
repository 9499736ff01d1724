/*
 * What http_responder and uring_responder share: the fixed answer to every request
 * and the scan that counts whole requests in a connection's input.
 */
#ifndef HTTP_HEALTH_H
#define HTTP_HEALTH_H

#include <string.h>

static const char RESPONSE[] =
    "HTTP/1.1 200 OK\r\n"
    "Content-Type: application/json\r\n"
    "Content-Length: 15\r\n"
    "\r\n"
    "{\"status\":\"ok\"}";
#define RESPONSE_LEN (sizeof(RESPONSE) - 1)

/*
 * Counts the complete requests (boundary "\r\n\r\n"; bodies are not read) in
 * in[0..*in_len], drops them and keeps the incomplete tail. *scanned is the prefix
 * already known to hold no boundary, kept between calls.
 */
static size_t take_requests(char *in, size_t *in_len, size_t *scanned)
{
    size_t n = 0, start = 0;
    size_t pos = *scanned;
    for (;;) {
        char *hit = memmem(in + pos, *in_len - pos, "\r\n\r\n", 4);
        if (!hit)
            break;
        n++;
        start = pos = (size_t)(hit - in) + 4;
    }
    if (start > 0) {
        memmove(in, in + start, *in_len - start);
        *in_len -= start;
    }
    /* A boundary may straddle the next read: rescan the last 3 bytes. */
    *scanned = *in_len > 3 ? *in_len - 3 : 0;
    return n;
}

#endif
