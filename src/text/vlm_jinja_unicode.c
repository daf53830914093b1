/*
 * The Unicode of Python's str methods in the Jinja interpreter: upper,
 * lower, title, capitalize, swapcase and casefold as Python 3 maps each
 * code point (utf8proc's simple mappings, SpecialCasing.txt's full ones
 * over them, final sigma), Jinja's title filter, and the character
 * classes of isalpha, isdigit, isnumeric, isspace, islower, istitle, ...
 *
 * The tables are what Python 3.11's unicodedata (Unicode 14.0) says
 * where utf8proc alone would differ; code points that Unicode 15.0
 * assigned are utf8proc's.  Not done: the mappings that depend on a
 * locale (Turkish and Lithuanian i), which Python does not do either.
 */

#include <string.h>
#include <utf8proc.h>

#include "vlm_jinja_int.h"


/* the full mappings of SpecialCasing.txt: upper, then title (Python's
 * str.upper() and str.title() of the one character) */
typedef struct {
    int32_t          cp;
    int32_t          upper[3];
    int32_t          title[3];
} vlm_jj_special_t;


static const vlm_jj_special_t  vlm_jj_special[] = {
    { 0x00df, { 0x0053, 0x0053, 0 }, { 0x0053, 0x0073, 0 } },
    { 0x0149, { 0x02bc, 0x004e, 0 }, { 0x02bc, 0x004e, 0 } },
    { 0x01f0, { 0x004a, 0x030c, 0 }, { 0x004a, 0x030c, 0 } },
    { 0x0390, { 0x0399, 0x0308, 0x0301 }, { 0x0399, 0x0308, 0x0301 } },
    { 0x03b0, { 0x03a5, 0x0308, 0x0301 }, { 0x03a5, 0x0308, 0x0301 } },
    { 0x0587, { 0x0535, 0x0552, 0 }, { 0x0535, 0x0582, 0 } },
    { 0x1e96, { 0x0048, 0x0331, 0 }, { 0x0048, 0x0331, 0 } },
    { 0x1e97, { 0x0054, 0x0308, 0 }, { 0x0054, 0x0308, 0 } },
    { 0x1e98, { 0x0057, 0x030a, 0 }, { 0x0057, 0x030a, 0 } },
    { 0x1e99, { 0x0059, 0x030a, 0 }, { 0x0059, 0x030a, 0 } },
    { 0x1e9a, { 0x0041, 0x02be, 0 }, { 0x0041, 0x02be, 0 } },
    { 0x1f50, { 0x03a5, 0x0313, 0 }, { 0x03a5, 0x0313, 0 } },
    { 0x1f52, { 0x03a5, 0x0313, 0x0300 }, { 0x03a5, 0x0313, 0x0300 } },
    { 0x1f54, { 0x03a5, 0x0313, 0x0301 }, { 0x03a5, 0x0313, 0x0301 } },
    { 0x1f56, { 0x03a5, 0x0313, 0x0342 }, { 0x03a5, 0x0313, 0x0342 } },
    { 0x1f80, { 0x1f08, 0x0399, 0 }, { 0x1f88, 0, 0 } },
    { 0x1f81, { 0x1f09, 0x0399, 0 }, { 0x1f89, 0, 0 } },
    { 0x1f82, { 0x1f0a, 0x0399, 0 }, { 0x1f8a, 0, 0 } },
    { 0x1f83, { 0x1f0b, 0x0399, 0 }, { 0x1f8b, 0, 0 } },
    { 0x1f84, { 0x1f0c, 0x0399, 0 }, { 0x1f8c, 0, 0 } },
    { 0x1f85, { 0x1f0d, 0x0399, 0 }, { 0x1f8d, 0, 0 } },
    { 0x1f86, { 0x1f0e, 0x0399, 0 }, { 0x1f8e, 0, 0 } },
    { 0x1f87, { 0x1f0f, 0x0399, 0 }, { 0x1f8f, 0, 0 } },
    { 0x1f88, { 0x1f08, 0x0399, 0 }, { 0x1f88, 0, 0 } },
    { 0x1f89, { 0x1f09, 0x0399, 0 }, { 0x1f89, 0, 0 } },
    { 0x1f8a, { 0x1f0a, 0x0399, 0 }, { 0x1f8a, 0, 0 } },
    { 0x1f8b, { 0x1f0b, 0x0399, 0 }, { 0x1f8b, 0, 0 } },
    { 0x1f8c, { 0x1f0c, 0x0399, 0 }, { 0x1f8c, 0, 0 } },
    { 0x1f8d, { 0x1f0d, 0x0399, 0 }, { 0x1f8d, 0, 0 } },
    { 0x1f8e, { 0x1f0e, 0x0399, 0 }, { 0x1f8e, 0, 0 } },
    { 0x1f8f, { 0x1f0f, 0x0399, 0 }, { 0x1f8f, 0, 0 } },
    { 0x1f90, { 0x1f28, 0x0399, 0 }, { 0x1f98, 0, 0 } },
    { 0x1f91, { 0x1f29, 0x0399, 0 }, { 0x1f99, 0, 0 } },
    { 0x1f92, { 0x1f2a, 0x0399, 0 }, { 0x1f9a, 0, 0 } },
    { 0x1f93, { 0x1f2b, 0x0399, 0 }, { 0x1f9b, 0, 0 } },
    { 0x1f94, { 0x1f2c, 0x0399, 0 }, { 0x1f9c, 0, 0 } },
    { 0x1f95, { 0x1f2d, 0x0399, 0 }, { 0x1f9d, 0, 0 } },
    { 0x1f96, { 0x1f2e, 0x0399, 0 }, { 0x1f9e, 0, 0 } },
    { 0x1f97, { 0x1f2f, 0x0399, 0 }, { 0x1f9f, 0, 0 } },
    { 0x1f98, { 0x1f28, 0x0399, 0 }, { 0x1f98, 0, 0 } },
    { 0x1f99, { 0x1f29, 0x0399, 0 }, { 0x1f99, 0, 0 } },
    { 0x1f9a, { 0x1f2a, 0x0399, 0 }, { 0x1f9a, 0, 0 } },
    { 0x1f9b, { 0x1f2b, 0x0399, 0 }, { 0x1f9b, 0, 0 } },
    { 0x1f9c, { 0x1f2c, 0x0399, 0 }, { 0x1f9c, 0, 0 } },
    { 0x1f9d, { 0x1f2d, 0x0399, 0 }, { 0x1f9d, 0, 0 } },
    { 0x1f9e, { 0x1f2e, 0x0399, 0 }, { 0x1f9e, 0, 0 } },
    { 0x1f9f, { 0x1f2f, 0x0399, 0 }, { 0x1f9f, 0, 0 } },
    { 0x1fa0, { 0x1f68, 0x0399, 0 }, { 0x1fa8, 0, 0 } },
    { 0x1fa1, { 0x1f69, 0x0399, 0 }, { 0x1fa9, 0, 0 } },
    { 0x1fa2, { 0x1f6a, 0x0399, 0 }, { 0x1faa, 0, 0 } },
    { 0x1fa3, { 0x1f6b, 0x0399, 0 }, { 0x1fab, 0, 0 } },
    { 0x1fa4, { 0x1f6c, 0x0399, 0 }, { 0x1fac, 0, 0 } },
    { 0x1fa5, { 0x1f6d, 0x0399, 0 }, { 0x1fad, 0, 0 } },
    { 0x1fa6, { 0x1f6e, 0x0399, 0 }, { 0x1fae, 0, 0 } },
    { 0x1fa7, { 0x1f6f, 0x0399, 0 }, { 0x1faf, 0, 0 } },
    { 0x1fa8, { 0x1f68, 0x0399, 0 }, { 0x1fa8, 0, 0 } },
    { 0x1fa9, { 0x1f69, 0x0399, 0 }, { 0x1fa9, 0, 0 } },
    { 0x1faa, { 0x1f6a, 0x0399, 0 }, { 0x1faa, 0, 0 } },
    { 0x1fab, { 0x1f6b, 0x0399, 0 }, { 0x1fab, 0, 0 } },
    { 0x1fac, { 0x1f6c, 0x0399, 0 }, { 0x1fac, 0, 0 } },
    { 0x1fad, { 0x1f6d, 0x0399, 0 }, { 0x1fad, 0, 0 } },
    { 0x1fae, { 0x1f6e, 0x0399, 0 }, { 0x1fae, 0, 0 } },
    { 0x1faf, { 0x1f6f, 0x0399, 0 }, { 0x1faf, 0, 0 } },
    { 0x1fb2, { 0x1fba, 0x0399, 0 }, { 0x1fba, 0x0345, 0 } },
    { 0x1fb3, { 0x0391, 0x0399, 0 }, { 0x1fbc, 0, 0 } },
    { 0x1fb4, { 0x0386, 0x0399, 0 }, { 0x0386, 0x0345, 0 } },
    { 0x1fb6, { 0x0391, 0x0342, 0 }, { 0x0391, 0x0342, 0 } },
    { 0x1fb7, { 0x0391, 0x0342, 0x0399 }, { 0x0391, 0x0342, 0x0345 } },
    { 0x1fbc, { 0x0391, 0x0399, 0 }, { 0x1fbc, 0, 0 } },
    { 0x1fc2, { 0x1fca, 0x0399, 0 }, { 0x1fca, 0x0345, 0 } },
    { 0x1fc3, { 0x0397, 0x0399, 0 }, { 0x1fcc, 0, 0 } },
    { 0x1fc4, { 0x0389, 0x0399, 0 }, { 0x0389, 0x0345, 0 } },
    { 0x1fc6, { 0x0397, 0x0342, 0 }, { 0x0397, 0x0342, 0 } },
    { 0x1fc7, { 0x0397, 0x0342, 0x0399 }, { 0x0397, 0x0342, 0x0345 } },
    { 0x1fcc, { 0x0397, 0x0399, 0 }, { 0x1fcc, 0, 0 } },
    { 0x1fd2, { 0x0399, 0x0308, 0x0300 }, { 0x0399, 0x0308, 0x0300 } },
    { 0x1fd3, { 0x0399, 0x0308, 0x0301 }, { 0x0399, 0x0308, 0x0301 } },
    { 0x1fd6, { 0x0399, 0x0342, 0 }, { 0x0399, 0x0342, 0 } },
    { 0x1fd7, { 0x0399, 0x0308, 0x0342 }, { 0x0399, 0x0308, 0x0342 } },
    { 0x1fe2, { 0x03a5, 0x0308, 0x0300 }, { 0x03a5, 0x0308, 0x0300 } },
    { 0x1fe3, { 0x03a5, 0x0308, 0x0301 }, { 0x03a5, 0x0308, 0x0301 } },
    { 0x1fe4, { 0x03a1, 0x0313, 0 }, { 0x03a1, 0x0313, 0 } },
    { 0x1fe6, { 0x03a5, 0x0342, 0 }, { 0x03a5, 0x0342, 0 } },
    { 0x1fe7, { 0x03a5, 0x0308, 0x0342 }, { 0x03a5, 0x0308, 0x0342 } },
    { 0x1ff2, { 0x1ffa, 0x0399, 0 }, { 0x1ffa, 0x0345, 0 } },
    { 0x1ff3, { 0x03a9, 0x0399, 0 }, { 0x1ffc, 0, 0 } },
    { 0x1ff4, { 0x038f, 0x0399, 0 }, { 0x038f, 0x0345, 0 } },
    { 0x1ff6, { 0x03a9, 0x0342, 0 }, { 0x03a9, 0x0342, 0 } },
    { 0x1ff7, { 0x03a9, 0x0342, 0x0399 }, { 0x03a9, 0x0342, 0x0345 } },
    { 0x1ffc, { 0x03a9, 0x0399, 0 }, { 0x1ffc, 0, 0 } },
    { 0xfb00, { 0x0046, 0x0046, 0 }, { 0x0046, 0x0066, 0 } },
    { 0xfb01, { 0x0046, 0x0049, 0 }, { 0x0046, 0x0069, 0 } },
    { 0xfb02, { 0x0046, 0x004c, 0 }, { 0x0046, 0x006c, 0 } },
    { 0xfb03, { 0x0046, 0x0046, 0x0049 }, { 0x0046, 0x0066, 0x0069 } },
    { 0xfb04, { 0x0046, 0x0046, 0x004c }, { 0x0046, 0x0066, 0x006c } },
    { 0xfb05, { 0x0053, 0x0054, 0 }, { 0x0053, 0x0074, 0 } },
    { 0xfb06, { 0x0053, 0x0054, 0 }, { 0x0053, 0x0074, 0 } },
    { 0xfb13, { 0x0544, 0x0546, 0 }, { 0x0544, 0x0576, 0 } },
    { 0xfb14, { 0x0544, 0x0535, 0 }, { 0x0544, 0x0565, 0 } },
    { 0xfb15, { 0x0544, 0x053b, 0 }, { 0x0544, 0x056b, 0 } },
    { 0xfb16, { 0x054e, 0x0546, 0 }, { 0x054e, 0x0576, 0 } },
    { 0xfb17, { 0x0544, 0x053d, 0 }, { 0x0544, 0x056d, 0 } },
};


/* CJK ideographs with a numeric value (Unihan), which str.isnumeric()
 * counts with the N* categories */
static const int32_t  vlm_jj_numeric_cjk[] = {
    0x03405, 0x03483, 0x0382a, 0x03b4d, 0x04e00, 0x04e03, 0x04e07,
    0x04e09, 0x04e5d, 0x04e8c, 0x04e94, 0x04e96, 0x04ebf, 0x04ec0,
    0x04edf, 0x04ee8, 0x04f0d, 0x04f70, 0x05104, 0x05146, 0x05169,
    0x0516b, 0x0516d, 0x05341, 0x05343, 0x05344, 0x05345, 0x0534c,
    0x053c1, 0x053c2, 0x053c3, 0x053c4, 0x056db, 0x058f1, 0x058f9,
    0x05e7a, 0x05efe, 0x05eff, 0x05f0c, 0x05f0d, 0x05f0e, 0x05f10,
    0x062fe, 0x0634c, 0x067d2, 0x06f06, 0x07396, 0x0767e, 0x08086,
    0x0842c, 0x08cae, 0x08cb3, 0x08d30, 0x09621, 0x09646, 0x0964c,
    0x09678, 0x096f6, 0x0f96b, 0x0f973, 0x0f978, 0x0f9b2, 0x0f9d1,
    0x0f9d3, 0x0f9fd, 0x20001, 0x20064, 0x200e2, 0x20121, 0x2092a,
    0x20983, 0x2098c, 0x2099c, 0x20aea, 0x20afd, 0x20b19, 0x22390,
    0x22998, 0x23b1b, 0x2626d, 0x2f890,
};


/* the characters of category No with a digit value: str.isdigit() counts
 * them with Nd (superscripts, circled digits, ...) */
static const int32_t  vlm_jj_digit_no[][2] = {
    { 0x000b2, 0x000b3 }, { 0x000b9, 0x000b9 }, { 0x01369, 0x01371 },
    { 0x019da, 0x019da }, { 0x02070, 0x02070 }, { 0x02074, 0x02079 },
    { 0x02080, 0x02089 }, { 0x02460, 0x02468 }, { 0x02474, 0x0247c },
    { 0x02488, 0x02490 }, { 0x024ea, 0x024ea }, { 0x024f5, 0x024fd },
    { 0x024ff, 0x024ff }, { 0x02776, 0x0277e }, { 0x02780, 0x02788 },
    { 0x0278a, 0x02792 }, { 0x10a40, 0x10a43 }, { 0x10e60, 0x10e68 },
    { 0x11052, 0x1105a }, { 0x1f100, 0x1f10a },
};


/* Word_Break MidLetter, MidNumLet and Single_Quote: Case_Ignorable with
 * the categories Mn, Me, Cf, Lm and Sk */
static const int32_t  vlm_jj_ignorable[] = {
    0x0027, 0x002e, 0x003a, 0x00b7, 0x0387, 0x055f, 0x05f4, 0x2018,
    0x2019, 0x2024, 0x2027, 0xfe13, 0xfe52, 0xfe55, 0xff07, 0xff0e,
    0xff1a
};


#define VLM_JJ_NELTS(a)  (sizeof(a) / sizeof((a)[0]))


static int
vlm_jj_in(const int32_t *set, size_t n, int32_t c)
{
    size_t  lo, hi, mid;

    lo = 0;
    hi = n;

    while (lo < hi) {
        mid = lo + (hi - lo) / 2;

        if (set[mid] == c) {
            return 1;
        }

        if (set[mid] < c) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }

    return 0;
}


size_t
vlm_jinja_cp(const char *s, size_t len, size_t i, int32_t *c)
{
    utf8proc_ssize_t  k;

    k = utf8proc_iterate((const utf8proc_uint8_t *) s + i,
                         (utf8proc_ssize_t) (len - i), c);
    if (k <= 0) {
        *c = -1;
        return 1;
    }

    return (size_t) k;
}


/* Python's str.isspace() of one character, which split(), strip() and
 * the \s of re also take */
int
vlm_jinja_space(int32_t c)
{
    if (c < 0x80) {
        return (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x20);
    }

    return c == 0x85 || c == 0xa0 || c == 0x1680
           || (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029
           || c == 0x202f || c == 0x205f || c == 0x3000;
}


static int
vlm_jj_category(int32_t c)
{
    return c < 0 ? UTF8PROC_CATEGORY_CN : (int) utf8proc_category(c);
}


static int
vlm_jj_upper(int32_t c)
{
    return c >= 0 && utf8proc_isupper(c);
}


static int
vlm_jj_lower(int32_t c)
{
    return c >= 0 && utf8proc_islower(c);
}


static int
vlm_jj_titlecase(int32_t c)
{
    return vlm_jj_category(c) == UTF8PROC_CATEGORY_LT;
}


/* Unicode's Cased */
static int
vlm_jj_cased(int32_t c)
{
    return vlm_jj_upper(c) || vlm_jj_lower(c) || vlm_jj_titlecase(c);
}


/* Unicode's Case_Ignorable */
static int
vlm_jj_case_ignorable(int32_t c)
{
    switch (vlm_jj_category(c)) {
    case UTF8PROC_CATEGORY_MN:
    case UTF8PROC_CATEGORY_ME:
    case UTF8PROC_CATEGORY_CF:
    case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_SK:
        return 1;
    default:
        return vlm_jj_in(vlm_jj_ignorable, VLM_JJ_NELTS(vlm_jj_ignorable),
                         c);
    }
}


static int
vlm_jj_numeric(int32_t c)
{
    switch (vlm_jj_category(c)) {
    case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_NL:
    case UTF8PROC_CATEGORY_NO:
        return 1;
    default:
        return vlm_jj_in(vlm_jj_numeric_cjk,
                         VLM_JJ_NELTS(vlm_jj_numeric_cjk), c);
    }
}


static int
vlm_jj_digit(int32_t c)
{
    size_t  i;

    if (vlm_jj_category(c) == UTF8PROC_CATEGORY_ND) {
        return 1;
    }

    for (i = 0; i < VLM_JJ_NELTS(vlm_jj_digit_no); i++) {
        if (c >= vlm_jj_digit_no[i][0] && c <= vlm_jj_digit_no[i][1]) {
            return 1;
        }
    }

    return 0;
}


static int
vlm_jj_alpha(int32_t c)
{
    switch (vlm_jj_category(c)) {
    case UTF8PROC_CATEGORY_LU:
    case UTF8PROC_CATEGORY_LL:
    case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO:
        return 1;
    default:
        return 0;
    }
}


#define VLM_JJ_MAP_UPPER  0
#define VLM_JJ_MAP_LOWER  1
#define VLM_JJ_MAP_TITLE  2
#define VLM_JJ_MAP_FOLD   3


/* one code point's full mapping, up to 3 code points; Σ's final form is
 * the caller's */
static size_t
vlm_jj_map(int32_t c, int how, int32_t *out)
{
    int                      lb;
    size_t                   lo, hi, mid, n;
    const int32_t           *seq;
    utf8proc_ssize_t         k;
    const vlm_jj_special_t  *sp;

    out[0] = c;

    if (c < 0) {
        return 1;
    }

    switch (how) {

    case VLM_JJ_MAP_LOWER:
        if (c == 0x130) {
            /* İ: i and a combining dot above */
            out[0] = 0x69;
            out[1] = 0x307;
            return 2;
        }

        out[0] = utf8proc_tolower(c);
        return 1;

    case VLM_JJ_MAP_FOLD:
        lb = 0;
        k = utf8proc_decompose_char(c, out, 3, UTF8PROC_CASEFOLD, &lb);
        if (k < 1 || k > 3) {
            out[0] = c;
            return 1;
        }

        return (size_t) k;

    default:
        lo = 0;
        hi = VLM_JJ_NELTS(vlm_jj_special);
        sp = NULL;

        while (lo < hi) {
            mid = lo + (hi - lo) / 2;

            if (vlm_jj_special[mid].cp == c) {
                sp = &vlm_jj_special[mid];
                break;
            }

            if (vlm_jj_special[mid].cp < c) {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }

        if (sp == NULL) {
            out[0] = how == VLM_JJ_MAP_UPPER ? utf8proc_toupper(c)
                                             : utf8proc_totitle(c);
            return 1;
        }

        seq = how == VLM_JJ_MAP_UPPER ? sp->upper : sp->title;

        for (n = 0; n < 3 && seq[n] != 0; n++) {
            out[n] = seq[n];
        }

        return n;
    }
}


/* Σ in s[start, end) at byte i: ς when a cased letter comes before it
 * and none after, case-ignorable ones skipped (Python's
 * handle_capital_sigma) */
static int32_t
vlm_jj_sigma(const char *s, size_t start, size_t end, size_t i)
{
    size_t   j, k;
    int32_t  c;

    j = i;
    c = -1;

    while (j > start) {
        do {
            j--;
        } while (j > start && ((unsigned char) s[j] & 0xc0) == 0x80);

        vlm_jinja_cp(s, end, j, &c);

        if (!vlm_jj_case_ignorable(c)) {
            break;
        }

        c = -1;
    }

    if (!vlm_jj_cased(c)) {
        return 0x3c3;
    }

    for (j = i + 2; j < end; j += k) {
        k = vlm_jinja_cp(s, end, j, &c);

        if (!vlm_jj_case_ignorable(c)) {
            return vlm_jj_cased(c) ? 0x3c3 : 0x3c2;
        }
    }

    return 0x3c2;
}


/* output in runs of one taint */
typedef struct {
    vlm_jctx_t      *ctx;
    size_t           n;
    uint8_t          taint;
    char             buf[256];
} vlm_jj_runs_t;


static vlm_status_t
vlm_jj_runs_flush(vlm_jj_runs_t *r)
{
    vlm_jv_t  v;

    if (r->n == 0) {
        return VLM_OK;
    }

    vlm_jj_set_str(&v, r->buf, r->n, r->taint ? VLM_JT_ALL : VLM_JT_NONE);
    r->n = 0;

    return vlm_jinja_emit(r->ctx, &v);
}


static vlm_status_t
vlm_jj_runs_put(vlm_jj_runs_t *r, const char *s, size_t len, uint8_t taint)
{
    vlm_status_t  rc;

    if (r->n > 0 && (r->taint != taint || r->n + len > sizeof(r->buf))) {
        rc = vlm_jj_runs_flush(r);
        if (rc != VLM_OK) {
            return rc;
        }
    }

    memcpy(r->buf + r->n, s, len);
    r->n += len;
    r->taint = taint;

    return VLM_OK;
}


static int
vlm_jj_word_sep(int32_t c)
{
    return c == '-' || c == '(' || c == '{' || c == '[' || c == '<'
           || vlm_jinja_space(c);
}


/*
 * how: 0 upper, 1 lower, 2 str.title, 3 capitalize, 4 swapcase,
 * 5 casefold, 6 Jinja's title filter, which splits at runs of
 * [-\s({\[<] and writes each piece as piece[0].upper() +
 * piece[1:].lower().  Each character keeps the taint of the one it
 * came from.
 */
vlm_status_t
vlm_jinja_case(vlm_jctx_t *ctx, const vlm_jv_t *s, int how, vlm_jv_t *out)
{
    int            map, prev;
    char           enc[4];
    size_t         i, k, j, e, n, word;
    int32_t        c, m[3];
    vlm_jbuf_t     b, *saved;
    vlm_status_t   rc;
    vlm_jj_runs_t  r;

    vlm_jj_capture_begin(ctx, &b, &saved);
    r.ctx = ctx;
    r.n = 0;
    r.taint = 0;
    rc = VLM_OK;
    prev = 0;
    word = 0;

    for (i = 0; rc == VLM_OK && i < s->len; i += k) {
        k = vlm_jinja_cp(s->u.s, s->len, i, &c);

        if (c < 0) {
            rc = vlm_jj_runs_put(&r, s->u.s + i, 1, vlm_jj_taint_at(s, i));
            prev = 0;
            continue;
        }

        switch (how) {
        case 0:
            map = VLM_JJ_MAP_UPPER;
            break;
        case 1:
            map = VLM_JJ_MAP_LOWER;
            break;
        case 2:
            map = prev ? VLM_JJ_MAP_LOWER : VLM_JJ_MAP_TITLE;
            prev = vlm_jj_cased(c);
            break;
        case 3:
            map = i == 0 ? VLM_JJ_MAP_TITLE : VLM_JJ_MAP_LOWER;
            break;
        case 4:
            map = vlm_jj_upper(c) ? VLM_JJ_MAP_LOWER
                  : vlm_jj_lower(c) ? VLM_JJ_MAP_UPPER : -1;
            break;
        case 5:
            map = VLM_JJ_MAP_FOLD;
            break;
        default:
            if (vlm_jj_word_sep(c)) {
                map = -1;
                prev = 0;
            } else {
                map = prev ? VLM_JJ_MAP_LOWER : VLM_JJ_MAP_UPPER;
                word = prev ? word : i + k;
                prev = 1;
            }
        }

        n = 1;
        m[0] = c;

        if (map == VLM_JJ_MAP_LOWER && c == 0x3a3) {
            /* the final sigma: within the word after its first letter
             * for the title filter, the whole string otherwise */
            if (how == 6) {
                for (j = i; j < s->len; j += e) {
                    e = vlm_jinja_cp(s->u.s, s->len, j, &c);

                    if (vlm_jj_word_sep(c)) {
                        break;
                    }
                }

                m[0] = vlm_jj_sigma(s->u.s, word, j, i);

            } else {
                m[0] = vlm_jj_sigma(s->u.s, 0, s->len, i);
            }

        } else if (map >= 0) {
            n = vlm_jj_map(c, map, m);
        }

        for (j = 0; rc == VLM_OK && j < n; j++) {
            rc = vlm_jj_runs_put(&r, enc,
                                 (size_t) utf8proc_encode_char(
                                     m[j], (utf8proc_uint8_t *) enc),
                                 vlm_jj_taint_at(s, i));
        }
    }

    if (rc == VLM_OK) {
        rc = vlm_jj_runs_flush(&r);
    }

    vlm_jj_capture_end(ctx, &b, saved, out);

    return rc;
}


/* Python's str.isX() for what: "alpha", "alnum", "decimal", "digit",
 * "numeric", "space", "lower", "upper", "title" */
int
vlm_jinja_str_is(const vlm_jv_t *s, const char *what)
{
    int      cased, prev, r;
    size_t   i, k;
    int32_t  c;

    cased = 0;
    prev = 0;

    for (i = 0; i < s->len; i += k) {
        k = vlm_jinja_cp(s->u.s, s->len, i, &c);

        switch (what[0]) {

        case 'l':
        case 'u':
            /* no character of the other case, one of this case */
            if (vlm_jj_titlecase(c)
                || (what[0] == 'l' ? vlm_jj_upper(c) : vlm_jj_lower(c)))
            {
                return 0;
            }

            cased |= what[0] == 'l' ? vlm_jj_lower(c) : vlm_jj_upper(c);
            continue;

        case 't':
            /* upper and title case only after uncased characters, lower
             * case only after cased ones */
            if (vlm_jj_upper(c) || vlm_jj_titlecase(c)) {
                if (prev) {
                    return 0;
                }

                prev = 1;
                cased = 1;

            } else if (vlm_jj_lower(c)) {
                if (!prev) {
                    return 0;
                }

                prev = 1;
                cased = 1;

            } else {
                prev = 0;
            }

            continue;

        case 'a':
            r = vlm_jj_alpha(c) || (what[2] == 'n' && vlm_jj_numeric(c));
            break;
        case 'd':
            r = what[2] == 'c' ? vlm_jj_category(c) == UTF8PROC_CATEGORY_ND
                               : vlm_jj_digit(c);
            break;
        case 'n':
            r = vlm_jj_numeric(c);
            break;
        default:
            r = c >= 0 && vlm_jinja_space(c);
        }

        if (!r) {
            return 0;
        }
    }

    if (what[0] == 'l' || what[0] == 'u' || what[0] == 't') {
        return cased;
    }

    return s->len > 0;
}
