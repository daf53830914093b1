/*
 * The two symbols of libgfortran.so.5 that Debian 12's OpenBLAS imports
 * (its LAPACK part: string concatenation and the ETIME timer), so that
 * the sysroot of scripts/gpu-check --fetch-debs carries this instead of
 * libgfortran and libquadmath (about 0.9 MB compressed).  The engine
 * calls OpenBLAS's sgemm only, which uses neither.
 *
 * Built with the version node of the real library:
 *
 *   cc -shared -fPIC -O2 -Wl,-soname,libgfortran.so.5 \
 *      -Wl,--version-script=VERSIONS -o libgfortran.so.5 libgfortran-min.c
 *
 * VERSIONS: GFORTRAN_8 { global: _gfortran_concat_string; _gfortran_etime;
 * local: *; };
 */

#include <stddef.h>
#include <string.h>
#include <sys/resource.h>


/* gfortran's array descriptor, as far as ETIME reads it */
typedef struct {
    float   *base_addr;
} vlm_gfc_array_r4_t;


float _gfortran_etime(vlm_gfc_array_r4_t *t);
void _gfortran_concat_string(size_t destlen, char *dest, size_t len1,
    const char *s1, size_t len2, const char *s2);


/* dest = s1 // s2, cut to destlen or padded with blanks */
void
_gfortran_concat_string(size_t destlen, char *dest, size_t len1,
    const char *s1, size_t len2, const char *s2)
{
    if (len1 >= destlen) {
        memcpy(dest, s1, destlen);
        return;
    }

    memcpy(dest, s1, len1);
    dest += len1;
    destlen -= len1;

    if (len2 >= destlen) {
        memcpy(dest, s2, destlen);
        return;
    }

    memcpy(dest, s2, len2);
    memset(dest + len2, ' ', destlen - len2);
}


/* user and system CPU seconds into t(1) and t(2) (LAPACK's SECOND passes
 * a contiguous REAL TARRAY(2)), their sum returned */
float
_gfortran_etime(vlm_gfc_array_r4_t *t)
{
    float          user, sys;
    struct rusage  ru;

    if (getrusage(RUSAGE_SELF, &ru) != 0) {
        t->base_addr[0] = -1.0f;
        t->base_addr[1] = -1.0f;
        return -1.0f;
    }

    user = (float) ru.ru_utime.tv_sec + ru.ru_utime.tv_usec * 1e-6f;
    sys = (float) ru.ru_stime.tv_sec + ru.ru_stime.tv_usec * 1e-6f;

    t->base_addr[0] = user;
    t->base_addr[1] = sys;

    return user + sys;
}
