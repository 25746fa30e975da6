/* A TCP relay that delivers every chunk a fixed time after it arrived, each way: the
 * network section's round trip (bench_network.py) where the kernel has no netem qdisc.
 *
 *     delay_relay ONE_WAY_MICROSECONDS LISTEN_ADDRESS PORT=TARGET_ADDRESS:TARGET_PORT ...
 *
 * Listens on LISTEN_ADDRESS:PORT for each mapping and forwards to its target; prints
 * "ready" once every listener is up. Written in C, single-threaded over ppoll, so that the
 * delay stays within a few microseconds of the one asked for and the relay's own CPU is
 * small beside the client's it sits next to (a Python relay cost about as much CPU per
 * command as the client under test). Chunks of one direction keep their order. A
 * connection that ends on either side is closed on both, whatever is still queued: the
 * benchmark never half-closes. Stopped by SIGTERM.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MAX_LISTENERS 16
#define MAX_PAIRS 512
#define CHUNK 65536

struct chunk {
    int64_t due_ns;
    size_t length;
    struct chunk *next;
    char data[];
};

/* One direction of a relayed connection: bytes read from `from` wait in the queue for `to`. */
struct direction {
    int from, to;
    struct chunk *head, *tail;
};

struct pair {
    int open;
    struct direction way[2];
};

static struct pair pairs[MAX_PAIRS];
static int listeners[MAX_LISTENERS];
static struct sockaddr_in targets[MAX_LISTENERS];
static int listener_count;
static int64_t delay_ns;

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void die(const char *what) {
    perror(what);
    exit(2);
}

static struct sockaddr_in address(const char *host, int port) {
    struct sockaddr_in sa;
    memset(&sa, 0, sizeof sa);
    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)port);
    if (inet_pton(AF_INET, host, &sa.sin_addr) != 1) {
        fprintf(stderr, "delay_relay: not an IPv4 address: %s\n", host);
        exit(2);
    }
    return sa;
}

static void no_delay(int fd) {
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

static void close_pair(struct pair *p) {
    for (int w = 0; w < 2; w++) {
        struct chunk *c = p->way[w].head;
        while (c != NULL) {
            struct chunk *next = c->next;
            free(c);
            c = next;
        }
        p->way[w].head = p->way[w].tail = NULL;
    }
    close(p->way[0].from);
    close(p->way[0].to);
    p->open = 0;
}

static void accept_on(int index) {
    int client = accept(listeners[index], NULL, NULL);
    if (client < 0)
        return;
    int server = socket(AF_INET, SOCK_STREAM, 0);
    if (server < 0 || connect(server, (struct sockaddr *)&targets[index], sizeof targets[index]) < 0) {
        close(client);
        if (server >= 0)
            close(server);
        return;
    }
    no_delay(client);
    no_delay(server);
    for (int i = 0; i < MAX_PAIRS; i++) {
        if (!pairs[i].open) {
            pairs[i].open = 1;
            pairs[i].way[0] = (struct direction){client, server, NULL, NULL};
            pairs[i].way[1] = (struct direction){server, client, NULL, NULL};
            return;
        }
    }
    close(client);
    close(server);
}

/* Reads what `d.from` has, queued for delivery a delay from now; 0 when the side ended. */
static int read_into(struct direction *d) {
    char buffer[CHUNK];
    /* (MSG_DONTWAIT: a slot reused within one poll round may have nothing to read yet.) */
    ssize_t got = recv(d->from, buffer, sizeof buffer, MSG_DONTWAIT);
    if (got <= 0)
        return got < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK);
    struct chunk *c = malloc(sizeof *c + (size_t)got);
    if (c == NULL)
        die("malloc");
    c->due_ns = now_ns() + delay_ns;
    c->length = (size_t)got;
    c->next = NULL;
    memcpy(c->data, buffer, (size_t)got);
    if (d->tail != NULL)
        d->tail->next = c;
    else
        d->head = c;
    d->tail = c;
    return 1;
}

/* Writes every chunk whose time has come; 0 when the receiving side is gone. */
static int deliver_due(struct direction *d, int64_t now) {
    while (d->head != NULL && d->head->due_ns <= now) {
        struct chunk *c = d->head;
        size_t sent = 0;
        while (sent < c->length) {
            ssize_t n = send(d->to, c->data + sent, c->length - sent, MSG_NOSIGNAL);
            if (n < 0 && errno == EINTR)
                continue;
            if (n <= 0)
                return 0;
            sent += (size_t)n;
        }
        d->head = c->next;
        if (d->head == NULL)
            d->tail = NULL;
        free(c);
    }
    return 1;
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: delay_relay ONE_WAY_MICROSECONDS LISTEN_ADDRESS PORT=HOST:PORT ...\n");
        return 2;
    }
    delay_ns = atoll(argv[1]) * 1000;
    /* The default 50 us of timer slack would be a quarter of a 0.2 ms round trip. */
    prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
    for (int i = 3; i < argc && listener_count < MAX_LISTENERS; i++) {
        char host[64];
        int port, target_port;
        if (sscanf(argv[i], "%d=%63[^:]:%d", &port, host, &target_port) != 3) {
            fprintf(stderr, "delay_relay: not PORT=HOST:PORT: %s\n", argv[i]);
            return 2;
        }
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        int one = 1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        struct sockaddr_in sa = address(argv[2], port);
        if (bind(fd, (struct sockaddr *)&sa, sizeof sa) < 0 || listen(fd, 128) < 0)
            die("bind/listen");
        targets[listener_count] = address(host, target_port);
        listeners[listener_count++] = fd;
    }
    printf("ready\n");
    fflush(stdout);

    static struct pollfd fds[MAX_LISTENERS + 2 * MAX_PAIRS];
    static int owner[MAX_LISTENERS + 2 * MAX_PAIRS];
    for (;;) {
        int count = 0;
        int64_t now = now_ns(), next_due = -1;
        for (int i = 0; i < listener_count; i++) {
            fds[count] = (struct pollfd){listeners[i], POLLIN, 0};
            owner[count++] = -1 - i;
        }
        for (int i = 0; i < MAX_PAIRS; i++) {
            if (!pairs[i].open)
                continue;
            for (int w = 0; w < 2; w++) {
                struct direction *d = &pairs[i].way[w];
                fds[count] = (struct pollfd){d->from, POLLIN, 0};
                owner[count++] = 2 * i + w;
                if (d->head != NULL && (next_due < 0 || d->head->due_ns < next_due))
                    next_due = d->head->due_ns;
            }
        }
        struct timespec wait, *timeout = NULL;
        if (next_due >= 0) {
            int64_t left = next_due > now ? next_due - now : 0;
            wait.tv_sec = left / 1000000000;
            wait.tv_nsec = left % 1000000000;
            timeout = &wait;
        }
        if (ppoll(fds, (nfds_t)count, timeout, NULL) < 0 && errno != EINTR)
            die("ppoll");
        for (int k = 0; k < count; k++) {
            if (!(fds[k].revents & (POLLIN | POLLHUP | POLLERR)))
                continue;
            if (owner[k] < 0) {
                accept_on(-1 - owner[k]);
                continue;
            }
            struct pair *p = &pairs[owner[k] / 2];
            if (p->open && !read_into(&p->way[owner[k] % 2]))
                close_pair(p);
        }
        now = now_ns();
        for (int i = 0; i < MAX_PAIRS; i++) {
            for (int w = 0; w < 2 && pairs[i].open; w++) {
                if (!deliver_due(&pairs[i].way[w], now))
                    close_pair(&pairs[i]);
            }
        }
    }
}
