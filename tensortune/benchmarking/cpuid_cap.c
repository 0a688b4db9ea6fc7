/* Make this process's CPUID report a narrower ISA than the machine's, so that a library that picks its kernels
 * from CPUID (onnxruntime's MLAS, PyTorch's cpuinfo and oneDNN) runs the code it would run on a machine of that
 * ISA. Linux's CPUID faulting (arch_prctl ARCH_SET_CPUID, x86-64, where the CPU or hypervisor has it) turns each
 * CPUID of the calling thread (and of threads it starts later) into a SIGSEGV; the handler below executes the real
 * CPUID with faulting off for a moment, clears the feature bits of the masks, writes the registers and steps over
 * the instruction. Any other SIGSEGV goes to the handler that was installed before. Programs started by exec see
 * the real CPU again (the kernel resets faulting on exec). */
#define _GNU_SOURCE
#include <asm/prctl.h>
#include <cpuid.h>
#include <signal.h>
#include <string.h>
#include <sys/syscall.h>
#include <ucontext.h>
#include <unistd.h>

/* bits to clear: leaf 1 ECX, leaf 7.0 EBX, ECX, EDX, leaf 7.1 EAX */
static unsigned int mask_1_ecx, mask_7_ebx, mask_7_ecx, mask_7_edx, mask_7_1_eax;
static struct sigaction previous;
static volatile unsigned long emulated;
static int installed;

static void on_segv(int sig, siginfo_t *info, void *context) {
    ucontext_t *uc = context;
    greg_t *r = uc->uc_mcontext.gregs;
    const unsigned char *ip = (const unsigned char *)r[REG_RIP];
    if (ip[0] == 0x0f && ip[1] == 0xa2) {
        unsigned int leaf = (unsigned int)r[REG_RAX], sub = (unsigned int)r[REG_RCX], a, b, c, d;
        syscall(SYS_arch_prctl, ARCH_SET_CPUID, 1);
        __cpuid_count(leaf, sub, a, b, c, d);
        syscall(SYS_arch_prctl, ARCH_SET_CPUID, 0);
        if (leaf == 1) c &= ~mask_1_ecx;
        if (leaf == 7 && sub == 0) { b &= ~mask_7_ebx; c &= ~mask_7_ecx; d &= ~mask_7_edx; }
        if (leaf == 7 && sub == 1) a &= ~mask_7_1_eax;
        r[REG_RAX] = a; r[REG_RBX] = b; r[REG_RCX] = c; r[REG_RDX] = d;
        r[REG_RIP] += 2;
        emulated++;
        return;
    }
    if (previous.sa_flags & SA_SIGINFO) {
        previous.sa_sigaction(sig, info, context);
    } else if (previous.sa_handler != SIG_IGN && previous.sa_handler != SIG_DFL) {
        previous.sa_handler(sig);
    } else {  /* no handler before ours: fault again with the default action (the process dies as it would have) */
        signal(SIGSEGV, SIG_DFL);
    }
}

/* Start faulting on this thread with the given masks. Returns 0, or -1 when the kernel or CPU has no CPUID
 * faulting (nothing is changed then). */
int tt_cpuid_cap(unsigned int m1_ecx, unsigned int m7_ebx, unsigned int m7_ecx, unsigned int m7_edx,
                 unsigned int m7_1_eax) {
    if (syscall(SYS_arch_prctl, ARCH_GET_CPUID, 0) < 0) return -1;
    mask_1_ecx = m1_ecx; mask_7_ebx = m7_ebx; mask_7_ecx = m7_ecx; mask_7_edx = m7_edx; mask_7_1_eax = m7_1_eax;
    if (installed) return 0;  /* a second call only changes the masks */
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_segv;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGSEGV, &sa, &previous) != 0) return -1;
    if (syscall(SYS_arch_prctl, ARCH_SET_CPUID, 0) != 0) {
        sigaction(SIGSEGV, &previous, 0);
        return -1;
    }
    installed = 1;
    return 0;
}

/* How many CPUID instructions the handler has answered. */
unsigned long tt_cpuid_emulated(void) { return emulated; }

/* CPUID(leaf, sub) as this thread sees it (capped or not): eax, ebx, ecx, edx into out. */
void tt_cpuid_query(unsigned int leaf, unsigned int sub, unsigned int out[4]) {
    __cpuid_count(leaf, sub, out[0], out[1], out[2], out[3]);
}
