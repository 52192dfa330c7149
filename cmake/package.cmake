# package.cmake — three Debian packages from one build (cpack -G DEB, run by
# scripts/package.sh; docs/packaging.md):
#   porteiro          porteiro, porteirod, porteirod.service, the man pages,
#                     /etc/porteiro/porteirod.yaml (a conffile)
#   libporteiro1      libporteiro.so.1 (SONAME from PORTEIRO_SOVERSION)
#   libporteiro-dev   porteiro.h, porteiro_config.h, porteiro_libevent.h, libporteiro.a,
#                     the .so link, porteiro.pc, porteiro-libevent.pc
# Dependencies come from the binaries (dpkg-shlibdeps); the version is the
# project's.

# The unit and the default configuration. Under /usr (the packages): the
# unit goes where Debian 12's packages put theirs; elsewhere under the prefix,
# so that `cmake --install` to a private prefix needs no root.
if(CMAKE_INSTALL_PREFIX STREQUAL "/usr")
  set(PT_UNIT_DIR /lib/systemd/system)
else()
  set(PT_UNIT_DIR lib/systemd/system)
endif()
install(FILES ${CMAKE_SOURCE_DIR}/packaging/porteirod.service
        DESTINATION ${PT_UNIT_DIR} COMPONENT porteiro)
install(FILES ${CMAKE_SOURCE_DIR}/packaging/porteirod.yaml
        DESTINATION ${CMAKE_INSTALL_FULL_SYSCONFDIR}/porteiro COMPONENT porteiro)
# HAProxy in front, asking porteirod over SPOE (docs/haproxy.md): the three
# files of examples/haproxy/, as they run.
install(FILES ${CMAKE_SOURCE_DIR}/examples/haproxy/haproxy.cfg
              ${CMAKE_SOURCE_DIR}/examples/haproxy/spoe.conf
              ${CMAKE_SOURCE_DIR}/examples/haproxy/porteirod.yaml
        DESTINATION ${CMAKE_INSTALL_DATAROOTDIR}/doc/porteiro/examples/haproxy COMPONENT porteiro)

# Each package's /usr/share/doc/NAME: copyright and changelog.gz (a native
# package: its version has no Debian revision).
set(PT_DEB_DIR ${CMAKE_BINARY_DIR}/debian)
configure_file(${CMAKE_SOURCE_DIR}/packaging/debian/changelog.in ${PT_DEB_DIR}/changelog @ONLY)
execute_process(COMMAND gzip -9nkf ${PT_DEB_DIR}/changelog)
# libnginx-mod-http-porteiro: when nginx/ builds the module (nginx-dev
# there, PORTEIRO_NGINX not OFF).
if((NOT DEFINED PORTEIRO_NGINX OR PORTEIRO_NGINX) AND EXISTS /usr/share/nginx/src/conf_flags)
  set(PT_NGINX_PACKAGE nginx:libnginx-mod-http-porteiro)
endif()
# python3-porteiro: when python/ builds the binding (python3-dev there).
if(PT_PYTHON_PACKAGE)
  set(PT_PY_PACKAGE python:python3-porteiro)
endif()
foreach(pair porteiro:porteiro lib:libporteiro${PORTEIRO_SOVERSION} dev:libporteiro-dev
        ${PT_NGINX_PACKAGE} ${PT_PY_PACKAGE})
  string(REPLACE ":" ";" pair ${pair})
  list(GET pair 0 component)
  list(GET pair 1 package)
  install(FILES ${CMAKE_SOURCE_DIR}/packaging/debian/copyright ${PT_DEB_DIR}/changelog.gz
          DESTINATION ${CMAKE_INSTALL_DATAROOTDIR}/doc/${package} COMPONENT ${component})
endforeach()

set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME porteiro)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_VENDOR "the porteiro authors")
set(CPACK_PACKAGE_CONTACT "porteiro maintainers <porteiro@example.org>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "distributed rate limiter on Redis or in memory")
set(CPACK_STRIP_FILES ON)
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_COMPONENTS_ALL porteiro lib dev)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
set(CPACK_DEBIAN_PACKAGE_HOMEPAGE "https://example.org/porteiro")

set(CPACK_DEBIAN_PORTEIRO_PACKAGE_NAME porteiro)
set(CPACK_DEBIAN_PORTEIRO_PACKAGE_SECTION net)
set(CPACK_COMPONENT_PORTEIRO_DESCRIPTION
"distributed rate limiter: command-line tool and HTTP sidecar
porteiro keeps rate-limit state in Redis and decides every check with one
atomic Lua script call, or in an in-process memory backend. Algorithms:
fixed and sliding windows, sliding log, token bucket, GCRA, concurrency
leases; policies of several limits decided all-or-nothing.

This package holds the porteiro command-line tool and porteirod, the HTTP
sidecar (/v1/check, /v1/auth for nginx auth_request, Prometheus metrics,
an agent for HAProxy's SPOE: examples in /usr/share/doc/porteiro/examples),
with a hardened systemd unit and a memory-backend configuration that
listens on 127.0.0.1 only.")
set(CPACK_DEBIAN_PORTEIRO_PACKAGE_CONTROL_EXTRA
  ${CMAKE_SOURCE_DIR}/packaging/debian/conffiles
  ${CMAKE_SOURCE_DIR}/packaging/debian/postinst
  ${CMAKE_SOURCE_DIR}/packaging/debian/prerm
  ${CMAKE_SOURCE_DIR}/packaging/debian/postrm)

set(CPACK_DEBIAN_LIB_PACKAGE_NAME libporteiro${PORTEIRO_SOVERSION})
set(CPACK_DEBIAN_LIB_PACKAGE_SECTION libs)
# shlibs: "libporteiro 1 libporteiro1 (>= VERSION)"; ldconfig runs from a
# dpkg trigger, so the maintainer scripts CPack would write to call it are
# replaced by empty ones.
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS ON)
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS_POLICY ">=")
set(CPACK_DEBIAN_LIB_PACKAGE_CONTROL_EXTRA
  ${CMAKE_SOURCE_DIR}/packaging/debian/lib/triggers
  ${CMAKE_SOURCE_DIR}/packaging/debian/lib/postinst
  ${CMAKE_SOURCE_DIR}/packaging/debian/lib/postrm)
set(CPACK_COMPONENT_LIB_DESCRIPTION
"distributed rate limiter library (Redis or in-process)
libporteiro decides rate-limit checks with one atomic Lua script call in
Redis (single node, Cluster or Sentinel), or in an in-process memory
backend, with blocking and libevent APIs.

This package holds the shared library.")

set(CPACK_DEBIAN_DEV_PACKAGE_NAME libporteiro-dev)
set(CPACK_DEBIAN_DEV_PACKAGE_SECTION libdevel)
# porteiro.pc names hiredis, yaml-0.1 and openssl (Requires.private), which
# pkg-config looks for even without --static; porteiro-libevent.pc names
# libevent (the adapter header includes event2/event.h).
set(CPACK_DEBIAN_DEV_PACKAGE_DEPENDS
  "libporteiro${PORTEIRO_SOVERSION} (= ${PROJECT_VERSION}), libhiredis-dev, libevent-dev, libyaml-dev, libssl-dev")
set(CPACK_COMPONENT_DEV_DESCRIPTION
"distributed rate limiter library (development files)
libporteiro decides rate-limit checks with one atomic Lua script call in
Redis, or in an in-process memory backend.

This package holds the headers porteiro.h (the core), porteiro_config.h
(the YAML config file) and porteiro_libevent.h (the libevent adapter), the
static library and the pkg-config files (pkg-config --libs porteiro;
porteiro-libevent for a program on libevent).")

# The nginx module (nginx/, docs/nginx.md), named and enabled as Debian's own
# module packages are: it depends on the ABI of the nginx it was built for
# (nginx-dev's libnginx-mod.abisubstvars), and its maintainer scripts manage
# /etc/nginx/modules-enabled/50-mod-http-porteiro.conf as dh_nginx's do.
if(PT_NGINX_PACKAGE)
  list(APPEND CPACK_COMPONENTS_ALL nginx)
  file(STRINGS /usr/share/nginx/src/debian/libnginx-mod.abisubstvars PT_NGINX_ABI
       REGEX "^nginx:abi=")
  string(REPLACE "nginx:abi=" "" PT_NGINX_ABI "${PT_NGINX_ABI}")
  set(CPACK_DEBIAN_NGINX_PACKAGE_NAME libnginx-mod-http-porteiro)
  set(CPACK_DEBIAN_NGINX_PACKAGE_SECTION httpd)
  set(CPACK_DEBIAN_NGINX_PACKAGE_DEPENDS "${PT_NGINX_ABI}")
  set(CPACK_DEBIAN_NGINX_PACKAGE_CONTROL_EXTRA
    ${CMAKE_SOURCE_DIR}/packaging/nginx/postinst
    ${CMAKE_SOURCE_DIR}/packaging/nginx/prerm
    ${CMAKE_SOURCE_DIR}/packaging/nginx/postrm)
  set(CPACK_COMPONENT_NGINX_DESCRIPTION
"distributed rate limiter inside nginx (porteiro)
ngx_http_porteiro_module decides rate limits in nginx itself against
porteiro's Redis: one limit shared by every nginx that uses the same Redis,
with the directives of nginx's limit_req (porteiro_limit, porteiro_status,
porteiro_dry_run...), no subrequest and no second process. Redis single
node, Cluster or Sentinel, over TLS; open, closed or local fallback.")
endif()

# The Python binding (python/, docs/python.md): the extension links
# libporteiro.so.1 of this build, which dpkg-shlibdeps cannot resolve
# before libporteiro1 is installed: its dependencies are written here.
if(PT_PYTHON_PACKAGE)
  list(APPEND CPACK_COMPONENTS_ALL python)
  set(CPACK_DEBIAN_PYTHON_PACKAGE_NAME python3-porteiro)
  set(CPACK_DEBIAN_PYTHON_PACKAGE_SECTION python)
  set(CPACK_DEBIAN_PYTHON_PACKAGE_SHLIBDEPS OFF)
  set(CPACK_DEBIAN_PYTHON_PACKAGE_DEPENDS
    "libporteiro${PORTEIRO_SOVERSION} (= ${PROJECT_VERSION}), python3 (>= ${PT_PYTHON_VERSION}), python3 (<< ${PT_PYTHON_NEXT}), libc6")
  set(CPACK_DEBIAN_PYTHON_PACKAGE_CONTROL_EXTRA ${CMAKE_SOURCE_DIR}/packaging/python/prerm)
  set(CPACK_DEBIAN_PYTHON_PACKAGE_SUGGESTS "python3-flask, python3-fastapi, python3-django, python3-uvloop")
  set(CPACK_COMPONENT_PYTHON_DESCRIPTION
"distributed rate limiter for Python (porteiro)
import porteiro: libporteiro's checks from Python, on Redis (single node,
Cluster, Sentinel, TLS) or in process memory; blocking (the GIL released
while Redis answers) and asyncio (on the running loop, uvloop too);
leases and reservations as context managers; a Flask extension, an ASGI
middleware and FastAPI dependency, and a Django middleware that answer 429
with the RateLimit headers porteirod sends.")
endif()

include(CPack)
