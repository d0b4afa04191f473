/* tandem -- command-line entry point. */
#include <stdio.h>
#include <string.h>

int main(int argc, char **argv) {
    if (argc < 2 || strcmp(argv[1], "--help") == 0) {
        printf("usage: tandem train CONFIG.yaml [key=value ...]\n");
        return argc < 2 ? 1 : 0;
    }
    fprintf(stderr, "tandem: error: unknown command '%s' (expected: train)\n", argv[1]);
    return 1;
}
