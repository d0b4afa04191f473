/* crc32c -- CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), as TFRecord files (TensorBoard event
 * files) checksum their records, and TFRecord's masking of it. Check value: crc32c("123456789") = 0xE3069283. */
#ifndef TN_CRC32C_H
#define TN_CRC32C_H

#include <stddef.h>
#include <stdint.h>

/* CRC-32C of n bytes, continuing from crc (0 to start). */
uint32_t tn_crc32c(uint32_t crc, const void *data, size_t n);
/* TFRecord's masked CRC: rotate right by 15 bits, add 0xa282ead8 (a CRC of data holding CRCs stays useful). */
uint32_t tn_crc32c_mask(uint32_t crc);

#endif
