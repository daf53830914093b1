/*
 * Backends by name.  The engine library knows the CPU backend; the CUDA
 * backend lives in build/libvlm_cuda.a, which only the engine executable
 * and the GPU tests link, so they register it here before loading a
 * model and the library itself never references CUDA.
 */

#include <string.h>

#include "vlm_backend.h"


#define VLM_MAX_BACKENDS  8       /* the tests register variants */


typedef struct {
    const char           *name;
    vlm_backend_init_pt   init;
} vlm_backend_entry_t;


static vlm_backend_entry_t  vlm_backends[VLM_MAX_BACKENDS] = {
    { "cpu", vlm_backend_cpu_init }
};


static vlm_backend_entry_t *
vlm_backend_find(const char *name)
{
    int  i;

    for (i = 0; i < VLM_MAX_BACKENDS && vlm_backends[i].name != NULL; i++) {
        if (strcmp(vlm_backends[i].name, name) == 0) {
            return &vlm_backends[i];
        }
    }

    return NULL;
}


vlm_status_t
vlm_backend_register(const char *name, vlm_backend_init_pt init)
{
    int                   i;
    vlm_backend_entry_t  *e;

    e = vlm_backend_find(name);
    if (e != NULL) {
        e->init = init;
        return VLM_OK;
    }

    for (i = 0; i < VLM_MAX_BACKENDS; i++) {
        if (vlm_backends[i].name == NULL) {
            vlm_backends[i].name = name;
            vlm_backends[i].init = init;
            return VLM_OK;
        }
    }

    return VLM_ERR_LIMIT;
}


int
vlm_backend_available(const char *name)
{
    return vlm_backend_find(name) != NULL;
}


vlm_status_t
vlm_backend_init(vlm_backend_t **be, const char *name,
    const vlm_backend_conf_t *conf, vlm_error_t *err)
{
    vlm_backend_entry_t  *e;

    *be = NULL;

    e = vlm_backend_find(name != NULL ? name : "cpu");
    if (e == NULL) {
        return vlm_error_set(err, VLM_ERR_UNSUPPORTED,
                             "backend \"%s\" is not built in this program",
                             name);
    }

    return e->init(be, conf, err);
}
