# What running once as an installed service needs, included by
# CMakeLists.txt after the targets exist: sd_notify (the unit's
# Type=notify), the install rules `make install` and the Debian package use
# (binary, shared library with its soname link, public headers, once.pc,
# man pages, examples, the unit), and the generated reference of the
# config keys in once.ini(5).
include(GNUInstallDirs)

# READY=1 / STOPPING=1 to systemd (src/server/ops/notify.c); without
# NOTIFY_SOCKET sd_notify does nothing.
pkg_check_modules(SYSTEMD REQUIRED IMPORTED_TARGET libsystemd)
target_link_libraries(onceserver PUBLIC PkgConfig::SYSTEMD)

install(TARGETS once RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(TARGETS libonce_shared LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(DIRECTORY include/once DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} FILES_MATCHING PATTERN "*.h")

# once.pc: the prefix is the one configured (make install passes PREFIX).
if(IS_ABSOLUTE "${CMAKE_INSTALL_LIBDIR}")
  set(ONCE_PC_LIBDIR "${CMAKE_INSTALL_LIBDIR}")
else()
  set(ONCE_PC_LIBDIR "\${prefix}/${CMAKE_INSTALL_LIBDIR}")
endif()
if(IS_ABSOLUTE "${CMAKE_INSTALL_INCLUDEDIR}")
  set(ONCE_PC_INCLUDEDIR "${CMAKE_INSTALL_INCLUDEDIR}")
else()
  set(ONCE_PC_INCLUDEDIR "\${prefix}/${CMAKE_INSTALL_INCLUDEDIR}")
endif()
configure_file(${CMAKE_SOURCE_DIR}/cmake/once.pc.in ${CMAKE_BINARY_DIR}/once.pc @ONLY)
install(FILES ${CMAKE_BINARY_DIR}/once.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)

# The examples: the C programs and the configs (their secrets are demo files).
install(FILES ${ONCE_EXAMPLES} DESTINATION ${CMAKE_INSTALL_DOCDIR}/examples)
file(GLOB ONCE_EXAMPLE_CONFIGS CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/examples/*.ini)
install(FILES ${ONCE_EXAMPLE_CONFIGS} DESTINATION ${CMAKE_INSTALL_DOCDIR}/examples)
install(DIRECTORY examples/secrets DESTINATION ${CMAKE_INSTALL_DOCDIR}/examples)

# The unit, with this install's binary in ExecStart; the Debian package
# ships the same file (debian/rules puts it in /lib/systemd/system).
set(ONCE_SYSTEMD_UNITDIR "lib/systemd/system" CACHE STRING "where once.service is installed (relative: under the prefix)")
configure_file(${CMAKE_SOURCE_DIR}/dist/once.service.in ${CMAKE_BINARY_DIR}/once.service @ONLY)
install(FILES ${CMAKE_BINARY_DIR}/once.service DESTINATION ${ONCE_SYSTEMD_UNITDIR})

# once.ini(5): its key reference generated from the loader's tables
# (man/config_keys.c prints them) and docs/config.md's meanings.
find_package(Python3 REQUIRED COMPONENTS Interpreter)
add_executable(config_keys man/config_keys.c)
target_include_directories(config_keys PRIVATE src)
target_link_libraries(config_keys PRIVATE onceserver)
add_custom_command(OUTPUT ${CMAKE_BINARY_DIR}/once.ini.5
  COMMAND config_keys > ${CMAKE_BINARY_DIR}/config_keys.tsv
  COMMAND Python3::Interpreter ${CMAKE_SOURCE_DIR}/scripts/man-config ${CMAKE_BINARY_DIR}/config_keys.tsv
          ${CMAKE_SOURCE_DIR}/docs/config.md ${CMAKE_SOURCE_DIR}/man/once.ini.5.in ${CMAKE_BINARY_DIR}/once.ini.5
  DEPENDS config_keys ${CMAKE_SOURCE_DIR}/scripts/man-config ${CMAKE_SOURCE_DIR}/docs/config.md
          ${CMAKE_SOURCE_DIR}/man/once.ini.5.in
  COMMENT "Generating once.ini(5) from the config tables")
add_custom_target(man ALL DEPENDS ${CMAKE_BINARY_DIR}/once.ini.5)
install(FILES man/once.1 DESTINATION ${CMAKE_INSTALL_MANDIR}/man1)
install(FILES ${CMAKE_BINARY_DIR}/once.ini.5 DESTINATION ${CMAKE_INSTALL_MANDIR}/man5)
