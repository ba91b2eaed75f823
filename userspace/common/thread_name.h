// Names the calling thread (as top -H, /proc/PID/task/TID/comm and profilers
// show it), so that the agent's cost can be told apart thread by thread.
#pragma once
#include <pthread.h>

namespace argus {

// At most 15 characters are kept (the kernel's limit); failures are harmless.
inline void name_this_thread(const char* name) { (void)pthread_setname_np(pthread_self(), name); }

}  // namespace argus
