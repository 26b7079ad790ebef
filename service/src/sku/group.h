/*
 * group — the limit groups' admin resource (group.c; SPEC §17, docs/design.md "Limit groups"):
 * PUT, GET and DELETE /api/v1/groups/{group}. The order path's side of a group (the
 * reservation of an order's units in it) is order_limit.h's.
 */
#ifndef INVENTORY_GROUP_H
#define INVENTORY_GROUP_H

struct areq;

/* PUT /api/v1/groups/{group} (admin): {"limit_per_user": 1..10^6}; 201 made, 200 changed,
 * {"group","limit_per_user","version"}; 400 a bad name or body. */
void group_put_async(struct areq *ar);

/* GET /api/v1/groups/{group} (admin): 200 {"group","limit_per_user","users","version"} (users:
 * how many users hold a count in it); 404 not_found when there is no such group. */
void group_get_async(struct areq *ar);

/* DELETE /api/v1/groups/{group} (admin): its keys go (the SKUs naming it are capped by it no
 * more); 200 {"group","deleted":true}; 404 not_found when there is no such group. */
void group_delete_async(struct areq *ar);

#endif
