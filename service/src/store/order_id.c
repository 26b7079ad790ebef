/*
 * order_id — order ids parsed (order_id.h).
 */
#include "order_id.h"

#include <string.h>

#include "ids.h"
#include "skucache.h"
#include "validate.h"

int order_id_parse(const char *id, size_t len, int *segment, char *sku)
{
    if (len < IDS_ORDER_HEX + 1 + 1 + 1 + 1 || len > ORDER_ID_MAX)
        return -1;
    for (int i = 0; i < IDS_ORDER_HEX; i++)
        if (!((id[i] >= '0' && id[i] <= '9') || (id[i] >= 'a' && id[i] <= 'f')))
            return -1;
    if (id[IDS_ORDER_HEX] != '-')
        return -1;
    size_t i = IDS_ORDER_HEX + 1;
    int k = 0, digits = 0;
    while (i < len && id[i] >= '0' && id[i] <= '9' && digits < 5) {
        k = k * 10 + (id[i++] - '0');
        digits++;
    }
    if (digits == 0 || digits > 4 || (digits > 1 && id[IDS_ORDER_HEX + 1] == '0') || i >= len ||
        id[i] != '-' || k >= SKUCACHE_MAX_SEGMENTS)
        return -1;
    i++;
    if (!validate_sku(id + i, len - i))
        return -1;
    memcpy(sku, id + i, len - i);
    sku[len - i] = '\0';
    *segment = k;
    return 0;
}
