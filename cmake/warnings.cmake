# cpt_set_warnings(target): the warning set for cpt's own code. Third-party headers come in
# through imported targets and are therefore SYSTEM includes, so they do not trip these.
function(cpt_set_warnings target)
  target_compile_options(${target} PRIVATE
    -Wall -Wextra -Wpedantic -Wshadow -Wconversion -Wsign-conversion
    -Wnon-virtual-dtor -Wold-style-cast -Woverloaded-virtual -Wimplicit-fallthrough)
  if(CPT_WERROR)
    target_compile_options(${target} PRIVATE -Werror)
  endif()
endfunction()
