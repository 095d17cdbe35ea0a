/* Keeps TensorFlow's gRPC server off every interface but the run's.
 *
 * TensorFlow listens on "0.0.0.0:<port>" (and "[::]:<port>") whatever address its cluster spec names.
 * Loaded with LD_PRELOAD, this bind() rewrites a wildcard bind to the port named in COMMBENCH_TF_BIND
 * ("ADDRESS PORT", set by commbench just before it starts the server) into a bind to ADDRESS (an IPv6
 * socket gets ADDRESS v4-mapped). Every other bind is passed through untouched. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <dlfcn.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

typedef int (*bind_fn)(int, const struct sockaddr *, socklen_t);

int bind(int fd, const struct sockaddr *addr, socklen_t len) {
    static bind_fn real;
    if (!real)
        real = (bind_fn)dlsym(RTLD_NEXT, "bind");
    const char *want = getenv("COMMBENCH_TF_BIND");
    char host[64], mapped[80];
    int port;
    if (!want || !addr || sscanf(want, "%63s %d", host, &port) != 2)
        return real(fd, addr, len);
    if (addr->sa_family == AF_INET && len >= (socklen_t)sizeof(struct sockaddr_in)) {
        struct sockaddr_in in;
        memcpy(&in, addr, sizeof in);
        if (in.sin_addr.s_addr == htonl(INADDR_ANY) && ntohs(in.sin_port) == port &&
            inet_pton(AF_INET, host, &in.sin_addr) == 1)
            return real(fd, (const struct sockaddr *)&in, sizeof in);
    } else if (addr->sa_family == AF_INET6 && len >= (socklen_t)sizeof(struct sockaddr_in6)) {
        struct sockaddr_in6 in6;
        memcpy(&in6, addr, sizeof in6);
        snprintf(mapped, sizeof mapped, strchr(host, ':') ? "%s" : "::ffff:%s", host);
        if (IN6_IS_ADDR_UNSPECIFIED(&in6.sin6_addr) && ntohs(in6.sin6_port) == port &&
            inet_pton(AF_INET6, mapped, &in6.sin6_addr) == 1)
            return real(fd, (const struct sockaddr *)&in6, sizeof in6);
    }
    return real(fd, addr, len);
}
