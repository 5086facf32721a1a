# kvb_write_if_changed(PATH TEXT): writes TEXT to PATH unless PATH already holds exactly TEXT, so a
# generated source whose content did not change keeps its time stamp and recompiles nothing.
# Included by the script-mode generators (cmake/git_sha.cmake, tasks/embed_files.cmake,
# cmake/gen_registry_list.cmake).
function(kvb_write_if_changed path text)
  set(old "")
  if(EXISTS ${path})
    file(READ ${path} old)
  endif()
  if(NOT old STREQUAL text)
    file(WRITE ${path} "${text}")
  endif()
endfunction()
