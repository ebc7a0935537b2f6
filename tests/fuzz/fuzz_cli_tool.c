/*
 * fuzz_cli_tool.c - tools/walrus.c for fuzz_cli: the shared helpers
 * (tool_fail, tool_open, tool_wants_help, tool_hex_decode) as the command
 * has them.  Its main() is renamed out of libFuzzer's way, and the
 * subcommands that fuzz_cli does not compile in get weak stubs, so that its
 * command table links.
 */
#define main walrus_tool_main
#include "../../tools/walrus.c"
#undef main

#define STUB(name)                                                                                 \
	__attribute__((weak)) int name(tool_ctx *ctx, int argc, char **argv)                       \
	{                                                                                          \
		(void)ctx;                                                                         \
		(void)argc;                                                                        \
		(void)argv;                                                                        \
		return TOOL_EXIT_ENGINE;                                                           \
	}
STUB(cmd_serve)
STUB(cmd_status)
STUB(cmd_stop)
STUB(cmd_standby)
STUB(cmd_promote)
STUB(cmd_slot)
STUB(cmd_space)
STUB(cmd_selftest)
STUB(cmd_doctor)
STUB(cmd_options)
STUB(cmd_config)
STUB(cmd_waldump)
STUB(cmd_controldata)
STUB(cmd_bench)
STUB(cmd_bench_kv)
STUB(cmd_bench_ckpt)
STUB(cmd_backup)
STUB(cmd_restore)
