"""bench_resnet.py -- torchvision's ResNet-18 training step (forward, cross-entropy, backward, AdamW) on a random
CIFAR-sized batch (64 x 3 x 32 x 32, 10 classes) with N threads, as bench/bench_resnet_step.c times tandem's.
Prints the median step time and images/s over STEPS steps after 2 warm-up steps.
Usage: /usr/bin/python3 bench_resnet.py THREADS [BATCH] [STEPS]"""
import statistics, sys, time

import torch
import torchvision

threads = int(sys.argv[1]); B = int(sys.argv[2]) if len(sys.argv) > 2 else 64; steps = int(sys.argv[3]) if len(sys.argv) > 3 else 10
torch.set_num_threads(threads)
torch.manual_seed(1)
m = torchvision.models.resnet18(num_classes=10).train()
opt = torch.optim.AdamW(m.parameters(), lr=1e-3, weight_decay=0.0)
x = torch.randn(B, 3, 32, 32); y = torch.randint(0, 10, (B,))
times = []
for s in range(steps + 2):
    t0 = time.perf_counter()
    opt.zero_grad()
    torch.nn.functional.cross_entropy(m(x), y).backward()
    opt.step()
    times.append(time.perf_counter() - t0)
med = statistics.median(times[2:])
print("pytorch  resnet18 batch %d: median step %.1f ms, %.1f images/s (%d steps, torch %s, mkldnn %s)"
      % (B, med * 1e3, B / med, steps, torch.__version__, torch.backends.mkldnn.is_available()))
