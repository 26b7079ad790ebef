/*
 * offload — see offload.h. A mutex-protected FIFO of jobs and n threads taking from it.
 * Ownership: a job's arg belongs to the job; the pool only holds it until a thread runs it.
 */
#include <pthread.h>
#include <stdlib.h>

#include "log.h"
#include "offload.h"

struct job {
    void (*fn)(void *);
    void *arg;
    struct job *next;
};

struct offload {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct job *head, *tail;
    int stopping;
    int n;
    pthread_t *threads;
};

static void *run(void *arg)
{
    struct offload *p = arg;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (!p->head && !p->stopping)
            pthread_cond_wait(&p->cv, &p->mu);
        struct job *j = p->head;
        if (!j)
            break; /* stopping and nothing left */
        p->head = j->next;
        if (!p->head)
            p->tail = NULL;
        pthread_mutex_unlock(&p->mu);
        j->fn(j->arg);
        log_set_request_id(NULL);
        free(j);
        pthread_mutex_lock(&p->mu);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

struct offload *offload_new(int n)
{
    struct offload *p = calloc(1, sizeof(*p));
    if (!p)
        return NULL;
    p->threads = calloc((size_t)n, sizeof(*p->threads));
    if (!p->threads) {
        free(p);
        return NULL;
    }
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    for (int i = 0; i < n; i++) {
        if (pthread_create(&p->threads[i], NULL, run, p) != 0)
            break;
        p->n++;
    }
    if (p->n == 0) {
        offload_free(p);
        return NULL;
    }
    return p;
}

int offload_submit(struct offload *p, void (*job)(void *), void *arg)
{
    struct job *j = malloc(sizeof(*j));
    if (!j)
        return -1;
    j->fn = job;
    j->arg = arg;
    j->next = NULL;
    pthread_mutex_lock(&p->mu);
    if (p->stopping) {
        pthread_mutex_unlock(&p->mu);
        free(j);
        return -1;
    }
    if (p->tail)
        p->tail->next = j;
    else
        p->head = j;
    p->tail = j;
    pthread_cond_signal(&p->cv);
    pthread_mutex_unlock(&p->mu);
    return 0;
}

void offload_stop(struct offload *p)
{
    if (!p)
        return;
    pthread_mutex_lock(&p->mu);
    int joined = p->stopping;
    p->stopping = 1;
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    if (joined)
        return;
    for (int i = 0; i < p->n; i++)
        pthread_join(p->threads[i], NULL);
}

void offload_free(struct offload *p)
{
    if (!p)
        return;
    offload_stop(p);
    pthread_cond_destroy(&p->cv);
    pthread_mutex_destroy(&p->mu);
    free(p->threads);
    free(p);
}
