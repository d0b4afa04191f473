/* image_set -- labelled images for classification, as torchvision's datasets give them, and its CIFAR training
 * transform.
 *
 * Owns: the CIFAR-10 binary version (cifar_bin.c: cifar-10-batches-bin/data_batch_{1..5}.bin, test_batch.bin,
 * batches.meta.txt), torchvision's ImageFolder layout (image_folder.c: one folder per class, classes in sorted
 * order, files sorted within a class; JPEG/PNG/WebP decoded by data/image.h as PIL does), and the batch transform
 * (image_augment.c): RandomCrop(size, padding) with zero fill, RandomHorizontalFlip(0.5), ToTensor, Normalize.
 * Pixels are kept as uint8 [n, C, H, W] (the CIFAR file's own plane order). A bad file or record is one line
 * naming it. */
#ifndef TN_IMAGE_SET_H
#define TN_IMAGE_SET_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    int n, C, H, W;
    uint8_t *px;            /* [n, C, H, W] */
    int32_t *labels;        /* [n] */
    int num_classes;
    char **class_names;     /* [num_classes] */
} tn_image_set;

/* CIFAR-10 binary folder: train (data_batch_1..5.bin) or test (test_batch.bin); class names from
 * batches.meta.txt. Each record is 1 label byte + 3072 pixel bytes (1024 R, 1024 G, 1024 B, rows of 32);
 * a file whose size is not a whole number of records, or a label outside 0..9, is refused naming the file
 * (and record). 0, or -1 with tn_err. */
int tn_cifar10_load(const char *dir, int train, tn_image_set *s);
/* ImageFolder: dir/<class>/<image>; every image converted to RGB and resized to size x size (PIL's bicubic) when
 * it is not that size. Files that are not images by extension are skipped as torchvision skips them
 * (IMG_EXTENSIONS); an image that does not decode is one line naming it. */
int tn_image_folder_load(const char *dir, int size, tn_image_set *s);
void tn_image_set_free(tn_image_set *s);
/* The demo's learnable task, generated (demo_shapes.c): n 32x32 images of 4 shape classes; split 0 train, 1 held out. */
int tn_demo_shapes(int n, int split, uint64_t seed, tn_image_set *s);

typedef struct {
    int crop_pad;           /* RandomCrop(H, padding=crop_pad) with zero fill; 0: no crop */
    int flip;               /* RandomHorizontalFlip(0.5) */
    float mean[3], std[3];  /* Normalize */
} tn_image_aug;
/* CIFAR-10 training: crop pad 4, flip, mean (0.4914, 0.4822, 0.4465), std (0.2470, 0.2435, 0.2616) */
tn_image_aug tn_image_aug_cifar(int train);

/* Images idx[0..n) of s transformed into float [n, C, H, W] (torch's layout). The random crop offset and flip of
 * image i are drawn from (seed, epoch, idx[i]) alone, so any split of a batch over ranks sees the same ones. */
void tn_image_batch(const tn_image_set *s, const int64_t *idx, int n, const tn_image_aug *aug, uint64_t seed,
                    int64_t epoch, float *out, int32_t *labels);

#endif
