/* SPDX-License-Identifier: Apache-2.0
 * ddp_devices: the visible-device list (CUDA_VISIBLE_DEVICES, or HIP_VISIBLE_DEVICES on ROCm),
 * read by one rule wherever ddprun needs it: counting GPUs under Slurm, and giving each worker its
 * own device under --virtual_local_rank.
 *
 * The rule is torch.cuda's (_parse_visible_devices), which follows the CUDA driver: entries are
 * separated by commas and blanks around an entry are ignored. A list whose first entry starts with
 * "GPU-" or "MIG-" is a list of UUIDs of that kind; otherwise each entry is a device ordinal read
 * like strtoul ("1gpu" is 1). The list ends at the first entry that is not a device of its kind
 * (an empty entry, "NoDevFiles", a negative number, a UUID of the other kind): "" and "NoDevFiles"
 * make no device visible. A repeated device makes the whole list empty. */
#ifndef DDP_DEVICES_H
#define DDP_DEVICES_H

#include <stddef.h>

/* The list in use, from the values of HIP_VISIBLE_DEVICES (hip) and CUDA_VISIBLE_DEVICES (cuda),
 * either NULL when unset: HIP's when set and not empty (ROCm reads it first), else CUDA's. *var
 * is set to the variable's name. Returns the list (borrowed from the arguments), or NULL when
 * CUDA_VISIBLE_DEVICES is unset too: no restriction. */
const char *ddp_devices_select(const char *hip, const char *cuda, const char **var);

/* Number of devices list makes visible by the rule above; -1 for NULL (no restriction). */
int ddp_devices_count(const char *list);

/* Copies device idx of list (0-based, as written, blanks removed) into out, NUL-terminated and
 * cut to cap - 1 bytes. Returns 0, or -ENOENT when list makes fewer than idx + 1 devices
 * visible (or is NULL). */
int ddp_devices_entry(const char *list, int idx, char *out, size_t cap);

#endif
